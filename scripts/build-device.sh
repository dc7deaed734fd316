#!/usr/bin/env bash
# Builds the device runtime for a board, stripped and linked so that the board needs
# only its C library and C++ runtime (libstdc++.so.6, libgcc_s.so.1): one file to copy.
# TLS and crypto come from mbedTLS, linked in (a TLS 1.2 client built from Debian's source
# with Kestrel's configuration by scripts/build-mbedtls.sh, as LTO objects; the host build
# keeps OpenSSL: docs/security.md). --static needs nothing at all (the C library and C++
# runtime inside too). Cap'n Proto is Debian's source built at -Os in lite mode with one
# section per function, as LTO objects (scripts/build-capnp.sh). Link-time optimisation on.
# scripts/device-size.sh says what each part costs.
#   scripts/build-device.sh aarch64-linux-gnu        # Raspberry Pi (64-bit OS), Jetson, phones
#   scripts/build-device.sh armv7a-linux-gnueabihf   # Raspberry Pi OS 32-bit
#   scripts/build-device.sh riscv64-linux-gnu        # RISC-V boards (VisionFive 2, Milk-V)
#   scripts/build-device.sh native                   # this machine
#   scripts/build-device.sh aarch64-linux-gnu --static   # no libc needed either: Android
# Also builds libkestrel_rt.{a,so} (the runtime exported kernel libraries link) in
# <build>/device_runtime. Prints the path and size of the result. Needs the cross toolchains and libraries from scripts/setup-cross.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
triple="${1:-native}"
static="${2:-}"
suffix=""
args=(-G Ninja -DCMAKE_BUILD_TYPE=MinSizeRel -DKESTREL_BUILD_HOST=OFF -DKESTREL_BUILD_TESTS=OFF
      -DKESTREL_BUILD_BENCH=OFF -DKESTREL_STATIC_RUNTIME=ON -DKESTREL_TLS_LIBRARY=mbedTLS
      -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=ON)
case "$static" in
  "") ;;
  --static) suffix="-static"; args+=(-DKESTREL_FULLY_STATIC=ON) ;;
  *) echo "build-device: unknown option '$static' (--static links the C library and C++ runtime in too)" >&2; exit 2 ;;
esac
build="${KESTREL_DEVICE_BUILD_DIR:-$root/build-device-$triple$suffix}"
case "$triple" in
  native) strip_tool=strip ;;
  aarch64-linux-gnu) strip_tool=aarch64-linux-gnu-strip
    args+=(-DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchains/aarch64-linux-gnu.cmake") ;;
  armv7a-linux-gnueabihf) strip_tool=arm-linux-gnueabihf-strip
    args+=(-DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchains/armv7a-linux-gnueabihf.cmake") ;;
  riscv64-linux-gnu) strip_tool=riscv64-linux-gnu-strip
    args+=(-DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchains/riscv64-linux-gnu.cmake")
    # Debian 12 has no riscv64 packages: scripts/build-riscv64-deps.sh builds the libraries.
    rv_prefix="${KESTREL_RISCV64_PREFIX:-/opt/kestrel/riscv64-linux-gnu}"
    if [ ! -f "$rv_prefix/.kestrel-deps" ]; then
      echo "build-device: no riscv64 libraries in $rv_prefix: run scripts/setup-cross.sh (it builds them)" >&2
      exit 1
    fi ;;
  *) echo "build-device: unknown target '$triple' (native, aarch64-linux-gnu, armv7a-linux-gnueabihf, riscv64-linux-gnu)" >&2; exit 2 ;;
esac
if ! command -v "$strip_tool" > /dev/null; then
  echo "build-device: $strip_tool not found: run scripts/setup-cross.sh (it installs the cross toolchains)" >&2
  exit 1
fi
# The boards' mbedTLS, a TLS 1.2 client only (scripts/build-mbedtls.sh: built once per
# triple, then found by its stamp; setup-cross.sh builds them all).
"$root/scripts/build-mbedtls.sh" "$triple" > /dev/null || exit 1
args+=(-DKESTREL_MBEDTLS_PREFIX="${KESTREL_MBEDTLS_ROOT:-/opt/kestrel}/mbedtls-$triple")
# The boards' Cap'n Proto: Debian's source at -Os with one section per function, LTO
# objects (scripts/build-capnp.sh: built once per triple, then found by its stamp), in place of
# the -O2 archives of libcapnp-dev:arm64/armhf and the riscv64 prefix. native keeps the
# system's.
if [ "$triple" != native ]; then
  "$root/scripts/build-capnp.sh" "$triple" > /dev/null || exit 1
  capnp="${KESTREL_CAPNP_ROOT:-/opt/kestrel}/capnp-$triple"
  args+=(-DCapnProto_DIR="$capnp/lib/cmake/CapnProto" -DKESTREL_CAPNP_STATIC="$capnp/lib/libcapnp.a"
         -DKESTREL_KJ_STATIC="$capnp/lib/libkj.a")
fi
mkdir -p "$build"
cmake -S "$root" "-B$build" "${args[@]}" > "$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 1; }
cmake --build "$build" -j "${KESTREL_JOBS:-2}" --target kestrel-device kestrel_rt kestrel_rt_shared > "$build/build.log" 2>&1 \
  || { tail -40 "$build/build.log" >&2; exit 1; }
"$strip_tool" -o "$build/kestrel-device" "$build/tools/kestrel-device"
size=$(stat -c %s "$build/kestrel-device")
needed=$(readelf -d "$build/kestrel-device" | awk '/NEEDED/ {gsub(/[\[\]]/, "", $5); print $5}' | tr '\n' ' ')
echo "$build/kestrel-device $size bytes ($((size / 1024)) KiB), needs: ${needed:-nothing}"
# The kernel runtime exported kernel libraries ship with (kestrel export copies it).
"$strip_tool" --strip-unneeded "$build/device_runtime/libkestrel_rt.so"
echo "$build/device_runtime/libkestrel_rt.{a,so} $(stat -c %s "$build/device_runtime/libkestrel_rt.so") bytes (.so)"
# The model runtime a whole-model export ships (libkestrel_model.so, kestrel_model.h) and
# its example program; a fully static build has no dynamic loader for the kernel library.
if [[ -z "$suffix" ]]; then
  cmake --build "$build" -j "${KESTREL_JOBS:-2}" --target kestrel_model_shared kestrel-model-run >> "$build/build.log" 2>&1 \
    || { tail -40 "$build/build.log" >&2; exit 1; }
  "$strip_tool" --strip-unneeded "$build/deploy/libkestrel_model.so"
  echo "$build/deploy/libkestrel_model.so $(stat -c %s "$build/deploy/libkestrel_model.so") bytes, needs:" \
    "$(readelf -d "$build/deploy/libkestrel_model.so" | awk '/NEEDED/ {gsub(/[\[\]]/, "", $5); print $5}' | tr '\n' ' ')"
fi
