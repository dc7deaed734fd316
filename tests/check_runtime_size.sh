#!/usr/bin/env bash
# Fails if a cross-built device runtime (scripts/build-device.sh, stripped, MinSizeRel)
# outgrows its budget or needs a shared library beyond the board's C library: the
# runtime ships to every board and its size is a product figure (docs/device-size.md
# says what each part costs; scripts/device-size.sh prints it).
#
# Issue 29's targets: aarch64 (glibc) <= 600 KB, the fully static aarch64 build
# <= 1.5 MB with TLS, armv7a <= 500 KB. The budgets below are what the builds are today
# plus about 3%, so any growth fails; each line also says how far a build is from its
# target. History: 922 / 1,650 / 606 KB (2026-11-23); with OpenSSL 3 and the schema
# check 1,316 / 5,671 / 910 KB and libssl.so.3 + libcrypto.so.3 NEEDED (issue 15);
# with mbedTLS linked in instead (a TLS 1.2 client: 500 KB of Debian's libmbed*.a),
# libsodium gone and LTO: 1,644 / 2,372 / 1,098 KB, needing only the C library (issue 29;
# the glibc builds grew by what OpenSSL's shared libraries used to carry off the file);
# the schema check without capnp's dynamic API: 1,513 / 2,241 / 1,024 KB. riscv64
# (issue 29 part 4, its libraries built from Debian's sources by
# scripts/build-riscv64-deps.sh): 1,303 KB, held to aarch64's target. With Kestrel's
# client-only mbedTLS (scripts/build-mbedtls.sh: 115 KB of mbedTLS on aarch64 instead of
# Debian's 500 KB): 1,185 / 1,847 / 741 KB and riscv64 1,011 KB (the same commit with
# Debian's libmbed*.a: 1,579 / 2,241 / 1,036 KB). With Kestrel's own seccomp filter
# instead of libseccomp (its syscall tables: 95-106 KB per build): 1,053 / 1,781 / 646 KB
# and riscv64 916 KB. With the boards' own Cap'n Proto (scripts/build-capnp.sh: -Os, one
# section per function, LTO) and no demangler (rpc/src/board_demangle.cpp): 725 / 1,454 /
# 454 KB and riscv64 648 KB, the static and armv7a builds within their targets. With
# Cap'n Proto in lite mode (the schema check walks rpc/src/wire_layout.inc), mbedTLS as
# LTO objects without unwind tables, and libstdc++.so.6 / libgcc_s.so.1 from the board
# (the glibc builds; the fully static one carries them): 595 / 1,388 / 388 KB and riscv64
# 546 KB, every build within its target (the aarch64 budget is the target itself). The
# aarch64 figures include the RELRO alignment padding GNU ld adds or drops as the layout
# shifts (under 64 KB; docs/device-size.md): the glibc build's loaded bytes end 5 KB
# below the point where that padding adds 64 KB, so growth of a few KB can fail its
# budget at once: docs/device-size.md says how to read that.
# Exits 77 (skipped) when no cross-built runtime exists.
set -euo pipefail
root="$1"
checked=0
status=0
# The shared libraries a glibc build may need: the C library's own and the C++ runtime's
# (libstdc++.so.6 and libgcc_s.so.1: every glibc distribution has them).
allowed='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|ld-linux-[a-z0-9_-]+\.so\.[0-9]+|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'
check() {
  local dir="$1" budget="$2" target="$3" static="$4" binary="$root/$1/kestrel-device"
  [ -x "$binary" ] || return 0
  checked=$((checked + 1))
  local bytes needed lib
  bytes=$(stat -c %s "$binary")
  needed=$(readelf -d "$binary" | awk '/NEEDED/ {gsub(/[\[\]]/, "", $5); print $5}')
  if [ "$bytes" -gt "$budget" ]; then
    echo "FAIL: $dir/kestrel-device is $bytes bytes, over its budget of $budget"
    status=1
  else
    local gap="$((bytes - target)) bytes over"
    [ "$bytes" -gt "$target" ] || gap="$((target - bytes)) bytes under"
    echo "$dir/kestrel-device: $bytes bytes (budget $budget; issue 29's target $target: $gap)"
  fi
  if [ "$static" = static ]; then
    if [ -n "$needed" ] || readelf -l "$binary" | grep -q INTERP; then
      echo "FAIL: $dir/kestrel-device must need nothing (fully static) but needs: $(echo "$needed" | tr '\n' ' ')"
      status=1
    fi
  else
    for lib in $needed; do
      if ! [[ "$lib" =~ $allowed ]]; then
        echo "FAIL: $dir/kestrel-device needs $lib: a board should need only its C library and C++ runtime"
        status=1
      fi
    done
  fi
}
# The model runtime a whole-model export ships (libkestrel_model.so, issue 28 part 3):
# today's size plus about 3% (aarch64 789,728, armv7a 470,332, riscv64 637,912 bytes
# stripped, 2026-11-28), and nothing beyond the C library.
check_model() {
  local dir="$1" budget="$2" library="$root/$1/deploy/libkestrel_model.so"
  [ -f "$library" ] || return 0
  checked=$((checked + 1))
  local bytes lib
  bytes=$(stat -c %s "$library")
  if [ "$bytes" -gt "$budget" ]; then
    echo "FAIL: $dir/deploy/libkestrel_model.so is $bytes bytes, over its budget of $budget"
    status=1
  else
    echo "$dir/deploy/libkestrel_model.so: $bytes bytes (budget $budget)"
  fi
  for lib in $(readelf -d "$library" | awk '/NEEDED/ {gsub(/[\[\]]/, "", $5); print $5}'); do
    if ! [[ "$lib" =~ $allowed ]]; then
      echo "FAIL: $dir/deploy/libkestrel_model.so needs $lib: a board should need only its C library"
      status=1
    fi
  done
}
check build-device-aarch64-linux-gnu 600000 600000 glibc
check build-device-aarch64-linux-gnu-static 1430000 1500000 static
check build-device-armv7a-linux-gnueabihf 400000 500000 glibc
check build-device-riscv64-linux-gnu 563000 600000 glibc
check_model build-device-aarch64-linux-gnu 813000
check_model build-device-armv7a-linux-gnueabihf 485000
check_model build-device-riscv64-linux-gnu 657000
if [ "$checked" -eq 0 ]; then
  echo "no cross-built runtime under $root (scripts/build-device.sh TRIPLE): skipped"
  exit 77
fi
exit $status
