# Sourced by the setup scripts: apt-get wrappers that survive a package mirror that
# hiccups. `apt_update` retries `apt-get update` and, when an index still fails (one
# foreign-architecture index mid-sync on the mirror, say), warns and goes on: the
# install that follows says for itself whether what is needed can still be had.
# `apt_install` retries the install, refreshing the indexes between tries.

SUDO="${SUDO-}"
if [ -z "$SUDO" ] && [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
APT_TRIES="${KESTREL_APT_TRIES:-4}"
APT_DELAY="${KESTREL_APT_RETRY_DELAY:-5}"  # seconds; the n-th retry waits n times this

apt_update() {
  local try
  for try in $(seq 1 "$APT_TRIES"); do
    if $SUDO apt-get update -qq; then return 0; fi
    echo "setup: apt-get update failed (try $try of $APT_TRIES)" >&2
    [ "$try" -lt "$APT_TRIES" ] && sleep $((try * APT_DELAY))
  done
  echo "setup: going on with the package indexes apt has; the install says if something is missing" >&2
  return 0
}

apt_install() {
  local try
  for try in $(seq 1 "$APT_TRIES"); do
    if $SUDO apt-get install -y -qq --no-install-recommends "$@"; then return 0; fi
    echo "setup: apt-get install failed (try $try of $APT_TRIES)" >&2
    if [ "$try" -lt "$APT_TRIES" ]; then sleep $((try * APT_DELAY)); apt_update; fi
  done
  echo "setup: could not install: $*" >&2
  return 1
}
