#!/usr/bin/env bash
# Tests scripts/apt-retry.sh against a fake apt-get: an `apt-get update` that keeps failing
# the way a mirror mid-sync does must not stop the setup when the install still works; an
# install that fails once is retried; one that always fails is reported and fails.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"
cat > "$work/bin/apt-get" <<'FAKE'
#!/usr/bin/env bash
# Fake apt-get: logs each call; `update` fails while $FAKE_DIR/update-fails exists; `install`
# fails as many times as $FAKE_DIR/install-fails says.
echo "$*" >> "$FAKE_DIR/calls"
case "$1" in
  update)
    if [ -e "$FAKE_DIR/update-fails" ]; then
      echo "E: Failed to fetch .../binary-armhf/Packages.xz  File has unexpected size (123 != 456). Mirror sync in progress?" >&2
      exit 100
    fi ;;
  install)
    n=$(cat "$FAKE_DIR/install-fails" 2>/dev/null || echo 0)
    if [ "$n" -gt 0 ]; then echo $((n - 1)) > "$FAKE_DIR/install-fails"; echo "E: Unable to fetch some archives" >&2; exit 100; fi ;;
esac
exit 0
FAKE
chmod +x "$work/bin/apt-get"
export PATH="$work/bin:$PATH" FAKE_DIR="$work" SUDO=" " KESTREL_APT_TRIES=3 KESTREL_APT_RETRY_DELAY=0
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=../../scripts/apt-retry.sh
source "$root/scripts/apt-retry.sh"

# 1. update keeps failing (mirror mid-sync): tried 3 times, then the setup goes on.
touch "$work/update-fails"; : > "$work/calls"
apt_update 2> "$work/err" || fail "apt_update stopped the setup on a mirror mid-sync"
[ "$(grep -c '^update' "$work/calls")" -eq 3 ] || fail "apt-get update was not retried 3 times"
grep -q "going on" "$work/err" || fail "no message that the setup goes on"
apt_install pkg-a pkg-b || fail "the install after a failed update did not go on"
grep -q "^install -y -qq --no-install-recommends pkg-a pkg-b" "$work/calls" || fail "install not called with the packages"

# 2. an install that fails once is retried (with an update in between) and succeeds.
rm -f "$work/update-fails"; : > "$work/calls"; echo 1 > "$work/install-fails"
apt_install pkg-c 2> "$work/err" || fail "a retried install failed"
[ "$(grep -c '^install' "$work/calls")" -eq 2 ] || fail "the install was not retried"
[ "$(grep -c '^update' "$work/calls")" -eq 1 ] || fail "no update between install tries"

# 3. an install that always fails is reported and fails.
: > "$work/calls"; echo 99 > "$work/install-fails"
if apt_install pkg-d 2> "$work/err"; then fail "an install that always fails succeeded"; fi
grep -q "could not install: pkg-d" "$work/err" || fail "no message naming the packages"
[ "$(grep -c '^install' "$work/calls")" -eq 3 ] || fail "the install was not tried 3 times"
echo "apt-retry: mirror mid-sync tolerated, installs retried, a lasting failure reported"
