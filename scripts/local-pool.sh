#!/usr/bin/env bash
# Sets up and builds Kestrel, then starts a tracker and a device on this machine
# (loopback only), shows the pool with `kestrel query`, and stops both.
# Until `kestrel tune` exists, this is the main job's smoke run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
bin="${KESTREL_BUILD_DIR:-$root/build}/tools"
work="$(mktemp -d)"
cleanup() {
  kill "${device_pid:-}" "${tracker_pid:-}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
"$bin/kestrel" tracker --port 0 --port-file "$work/port" 2> "$work/tracker.log" &
tracker_pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
[ -s "$work/port" ] || { cat "$work/tracker.log"; exit 1; }
port="$(cat "$work/port")"
"$bin/kestrel-device" --tracker "127.0.0.1:$port" --key local 2> "$work/device.log" &
device_pid=$!
for _ in $(seq 100); do grep -q "registered with" "$work/device.log" && break; sleep 0.05; done
"$bin/kestrel" query --tracker "127.0.0.1:$port"
