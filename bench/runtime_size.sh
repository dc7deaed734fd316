#!/usr/bin/env bash
# Prints the size of the shipped device runtime per target (stripped, needing only the
# board's libc) next to the reference range of the TVM runtime (200-600 KB).
#   bench/runtime_size.sh                 # native, aarch64 (and fully static), armv7a
#   bench/runtime_size.sh aarch64-linux-gnu
# Cross targets need scripts/setup-cross.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(native aarch64-linux-gnu "aarch64-linux-gnu --static" armv7a-linux-gnueabihf)
printf "%-33s %10s %8s  %s\n" TARGET BYTES KIB "NEEDS (vs TVM runtime 200-600 KB)"
for t in "${targets[@]}"; do
  # shellcheck disable=SC2086  # "TRIPLE --static" is two arguments
  line=$("$root/scripts/build-device.sh" $t 2>&1 | tail -1) || { echo "$t: build failed: $line"; continue; }
  bytes=$(echo "$line" | awk '{print $2}')
  needs=$(echo "$line" | sed 's/.*needs: //')
  printf "%-33s %10s %8s  %s\n" "$t" "$bytes" "$((bytes / 1024))" "$needs"
done
