#!/usr/bin/env bash
# Prints the size of the shipped device runtime per target (kestrel-device, stripped,
# needing only the board's libc) next to the reference range of the TVM runtime
# (200-600 KB), and the size of libkestrel_rt.so (what exported kernel libraries ship with).
#   bench/runtime_size.sh                 # native, aarch64 (and fully static), armv7a, riscv64
#   bench/runtime_size.sh aarch64-linux-gnu
# Cross targets need scripts/setup-cross.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(native aarch64-linux-gnu "aarch64-linux-gnu --static" armv7a-linux-gnueabihf riscv64-linux-gnu)
printf "%-33s %10s %8s %12s  %s\n" TARGET BYTES KIB "RT .so BYTES" "NEEDS (vs TVM runtime 200-600 KB)"
for t in "${targets[@]}"; do
  # build-device.sh prints the kestrel-device line, then the libkestrel_rt line.
  # shellcheck disable=SC2086  # "TRIPLE --static" is two arguments
  if ! out=$("$root/scripts/build-device.sh" $t 2>&1); then
    echo "$t: build failed: $(echo "$out" | tail -1)"
    continue
  fi
  line=$(echo "$out" | grep '/kestrel-device ' | tail -1)
  rt=$(echo "$out" | grep '/libkestrel_rt' | tail -1 | awk '{print $2}')
  bytes=$(echo "$line" | awk '{print $2}')
  needs=$(echo "$line" | sed 's/.*needs: //')
  printf "%-33s %10s %8s %12s  %s\n" "$t" "$bytes" "$((bytes / 1024))" "${rt:--}" "$needs"
done
