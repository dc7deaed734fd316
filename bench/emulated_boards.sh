#!/usr/bin/env bash
# Wall time of short tuning sessions on emulated boards: a tracker on loopback, two
# aarch64 boards under key rpi4 and one armv7 board under key rpi3 (the cross-built
# runtimes under qemu user-mode emulation), and one `kestrel tune` session per key at
# the same time. Prints the runtime sizes, then per session the trials, the wall time,
# the time per trial and the best and default GFLOP/s.
#   bench/emulated_boards.sh [TRIALS] [SHAPE]      # defaults: 24 trials, gemm 64x64x64
# Needs build/tools/kestrel (scripts/build.sh) and the cross builds
# (scripts/setup-cross.sh && scripts/build-device.sh aarch64-linux-gnu|armv7a-linux-gnueabihf).
# Emulation runs the kernels 10-50x slower than the real boards would: the figures show
# what the host side of a session costs, not what a Raspberry Pi reaches.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
trials="${1:-24}"
shape="${2:-64x64x64}"
kestrel="${KESTREL_BIN:-$root/build/tools/kestrel}"
[ -x "$kestrel" ] || { echo "emulated_boards: $kestrel not built (scripts/build.sh)" >&2; exit 1; }
declare -A qemu=([aarch64-linux-gnu]=qemu-aarch64-static [armv7a-linux-gnueabihf]=qemu-arm-static)
declare -A loader=([aarch64-linux-gnu]=/lib/ld-linux-aarch64.so.1 [armv7a-linux-gnueabihf]=/lib/ld-linux-armhf.so.3)
declare -A sysroot=([aarch64-linux-gnu]=/usr/aarch64-linux-gnu [armv7a-linux-gnueabihf]=/usr/arm-linux-gnueabihf)
for t in aarch64-linux-gnu armv7a-linux-gnueabihf; do
  [ -x "$root/build-device-$t/kestrel-device" ] ||
    { echo "emulated_boards: no runtime for $t (scripts/build-device.sh $t)" >&2; exit 1; }
  command -v "${qemu[$t]}" > /dev/null || { echo "emulated_boards: ${qemu[$t]} missing (scripts/setup-cross.sh)" >&2; exit 1; }
done

work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$kestrel" tracker --port 0 --port-file "$work/port" --log-level warn 2> "$work/tracker.log" &
pids+=($!)
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
tracker="127.0.0.1:$(cat "$work/port")"

board() {  # triple key name
  local t=$1 emulator=("${qemu[$1]}")
  # The board's loader and libc must come from one glibc build (see tests/boards).
  [ -r "${loader[$t]}" ] || emulator+=(-L "${sysroot[$t]}")
  "${emulator[@]}" "$root/build-device-$t/kestrel-device" --tracker "$tracker" --key "$2" --name "$3" \
    --log-level warn 2> "$work/$3.log" &
  pids+=($!)
}
board aarch64-linux-gnu rpi4 rpi4-a
board aarch64-linux-gnu rpi4 rpi4-b
board armv7a-linux-gnueabihf rpi3 rpi3-a
for _ in $(seq 100); do
  n=$("$kestrel" query --tracker "$tracker" --json 2> /dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["devices"]))' || echo 0)
  [ "$n" = 3 ] && break
  sleep 0.2
done
[ "$n" = 3 ] || { echo "emulated_boards: boards did not register" >&2; cat "$work"/*.log >&2; exit 1; }

echo "runtime sizes (stripped, need only libc):"
for t in aarch64-linux-gnu armv7a-linux-gnueabihf; do
  bytes=$(stat -c %s "$root/build-device-$t/kestrel-device")
  printf "  %-24s %8d bytes (%d KiB)\n" "$t" "$bytes" "$((bytes / 1024))"
done
echo
echo "gemm $shape, $trials trials per session, both sessions at once (host: $(nproc) cores):"

session() {  # key devices
  local start end
  start=$(date +%s.%N)
  "$kestrel" tune --op gemm --shape "$shape" --trials "$trials" --batch 8 --tracker "$tracker" --key "$1" \
    --devices "$2" --db "$work/$1.db" --repeat 3 --min-repeat-ms 5 --final-top 1 --json \
    > "$work/$1.json" 2> "$work/$1.tune.log"
  end=$(date +%s.%N)
  echo "$start $end" > "$work/$1.time"
}
session rpi4 2 &
s1=$!
session rpi3 1 &
s2=$!
wait $s1 || { echo "rpi4 session failed:" >&2; tail "$work/rpi4.tune.log" >&2; exit 1; }
wait $s2 || { echo "rpi3 session failed:" >&2; tail "$work/rpi3.tune.log" >&2; exit 1; }

printf "%-6s %-24s %7s %7s %8s %10s %12s %12s\n" KEY TARGET DEVICES TRIALS "WALL s" "s/TRIAL" "BEST GF/s" "DEFAULT GF/s"
for key in rpi4 rpi3; do
  devices=$([ $key = rpi4 ] && echo 2 || echo 1)
  python3 - "$work/$key.json" "$work/$key.time" "$key" "$devices" << 'PY'
import json, sys
r = json.load(open(sys.argv[1]))
start, end = map(float, open(sys.argv[2]).read().split())
wall = end - start
best = max((f["gflops"] for f in r["final"] if f.get("status") == "ok"), default=0.0)
print(f'{sys.argv[3]:<6} {r["target"]:<24} {sys.argv[4]:>7} {r["trials"]:>7} {wall:>8.1f} {wall / max(r["trials"], 1):>10.2f} '
      f'{best:>12.2f} {r.get("default_gflops") or 0:>12.2f}   statuses {r["statuses"]}')
PY
done
