#!/usr/bin/env bash
# The fully static aarch64 runtime (scripts/build-device.sh aarch64-linux-gnu --static,
# the Android build) runs with no libraries at all: it has no program interpreter and
# needs no shared object, and under qemu-aarch64-static with an empty sysroot (-L of an
# empty folder) and an empty environment it answers --version and --help and detects an
# aarch64 board with --print-info. deploy-board.sh --static picks it for an aarch64 board.
# (tests/check_runtime_size.sh checks its size and NEEDED list; the boards test runs it
# as an rpi4 board with the host's arm64 libraries present.)
#   tests/deploy/static_runtime_qemu_test.sh SOURCE_DIR
# Exits 77 (skipped) without the static build or qemu-aarch64-static.
set -euo pipefail
src=$(realpath "$1")
binary="$src/build-device-aarch64-linux-gnu-static/kestrel-device"
qemu=$(command -v qemu-aarch64-static || true)
if [ ! -f "$binary" ]; then
  echo "no ${binary#"$src"/} (scripts/setup-cross.sh, then scripts/build-device.sh aarch64-linux-gnu --static): skipped"
  exit 77
fi
if [ -z "$qemu" ]; then
  echo "no qemu-aarch64-static (scripts/setup-cross.sh installs it): skipped"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/empty-sysroot"
status=0
fail() {
  echo "FAIL: $*"
  status=1
}

if command -v readelf > /dev/null; then
  if readelf -l "$binary" | grep -q INTERP; then
    fail "the static runtime names a program interpreter: $(readelf -l "$binary" | grep -A1 INTERP | tail -1)"
  fi
  needed=$(readelf -d "$binary" 2> /dev/null | grep NEEDED || true)
  [ -z "$needed" ] || fail "the static runtime needs shared objects: $needed"
else
  echo "no readelf: the ELF headers are not checked"
fi

# run ARGS...: the runtime under qemu, nothing from this machine's libraries reachable.
run() { env -i "$qemu" -L "$dir/empty-sysroot" "$binary" "$@"; }
out=$(run --version 2>&1) || fail "--version failed under qemu with an empty sysroot: $out"
[[ "$out" =~ ^kestrel-device\ [0-9]+\.[0-9]+ ]] || fail "--version printed '$out'"
out=$(run --help 2>&1) || fail "--help failed: $out"
grep -q -- "--tracker HOST:PORT" <<< "$out" || fail "--help does not list --tracker: $out"
out=$(timeout 60 env -i "$qemu" -L "$dir/empty-sysroot" "$binary" --print-info 2>&1) || fail "--print-info failed: $out"
grep -q "^triple: *aarch64-linux-gnu$" <<< "$out" || fail "--print-info does not report aarch64-linux-gnu: $out"

# deploy-board.sh --static --arch aarch64 --to DIR ships exactly this file.
"$src/scripts/deploy-board.sh" --to "$dir/out" --arch aarch64 --static --tracker 192.168.1.10:9190 --key pixel7 \
  > "$dir/to.log" 2>&1 || fail "deploy-board.sh --static --to failed: $(cat "$dir/to.log")"
cmp -s "$binary" "$dir/out/kestrel-device" || fail "deploy-board.sh --static did not ship the static build"

[ "$status" -eq 0 ] && echo "the static aarch64 runtime runs under qemu with no libraries: --version, --help, --print-info"
exit $status
