#!/usr/bin/env bash
# Sets up and builds Kestrel, then runs the main job on the embedded default: a local
# tuning session (an in-process tracker and a kestrel-device child on loopback) for one
# gemm workload, recording every trial in ./kestrel.db, and prints the result table.
# Extra arguments go to `kestrel tune` (e.g. --trials 50, --strategy random).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
exec "${KESTREL_BUILD_DIR:-$root/build}/tools/kestrel" tune --op gemm --shape 256x256x256 --trials 200 "$@"
