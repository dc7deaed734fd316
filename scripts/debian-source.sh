# Sourced by the scripts that build libraries from Debian's own source packages
# (scripts/build-riscv64-deps.sh, scripts/build-mbedtls.sh). Needs scripts/apt-retry.sh
# sourced first (APT_TRIES, APT_DELAY).
#
# `debian_source WORK PACKAGE...` fetches the source packages with `apt-get source` into
# WORK/src (unpacked, Debian's patches applied: one folder per package), from the mirrors
# apt already uses, through a private apt state under WORK/apt: deb-src entries made from
# the system's deb entries; the system's apt configuration is not changed. Retried when
# the mirror hiccups (the n-th retry waits n times APT_DELAY seconds); returns non-zero
# when every try failed.
debian_source() {
  local work="$1" f try
  shift
  mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/apt/sources.list.d" "$work/src"
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && sed 's/^Types:.*/Types: deb-src/' "$f" > "$work/apt/sources.list.d/$(basename "$f")"
  done
  if [ -f /etc/apt/sources.list ]; then
    sed -n 's/^deb \(.*\)/deb-src \1/p' /etc/apt/sources.list > "$work/apt/sources.list.d/list.list"
  fi
  local apt_opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work/apt/sources.list.d"
                  -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
                  -o APT::Sandbox::User=root)
  for try in $(seq 1 "$APT_TRIES"); do
    if apt-get "${apt_opts[@]}" -qq update && (cd "$work/src" && apt-get "${apt_opts[@]}" -qq source "$@"); then
      return 0
    fi
    echo "debian-source: fetching the source packages $* failed (try $try of $APT_TRIES)" >&2
    # A half-unpacked folder from the failed try would be taken for the package.
    rm -rf "${work:?}/src" && mkdir -p "$work/src"
    [ "$try" -lt "$APT_TRIES" ] && sleep $((try * APT_DELAY))
  done
  echo "debian-source: could not fetch the sources of $*" >&2
  return 1
}
