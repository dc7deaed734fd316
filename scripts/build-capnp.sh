#!/usr/bin/env bash
# Builds the boards' Cap'n Proto: Debian's own capnproto source package (the version of
# libcapnp-dev, so the host's capnp compiler and the generated code match it), compiled
# with -Os -ffunction-sections -fdata-sections and as GCC LTO objects (-flto
# -ffat-lto-objects: the device's LTO link compiles Cap'n Proto with Kestrel's code; the
# fat objects also serve a link without LTO), static and position independent, for each
# triple given (default: every board triple), into $KESTREL_CAPNP_ROOT/capnp-<triple>
# (default /opt/kestrel/capnp-<triple>): libcapnp.a, libkj.a, the headers and the CMake
# package. scripts/build-device.sh links it (CapnProto_DIR, KESTREL_CAPNP_STATIC,
# KESTREL_KJ_STATIC); the host build keeps Debian's libcapnp-dev.
#   scripts/build-capnp.sh                       # aarch64, armv7a, riscv64
#   scripts/build-capnp.sh aarch64-linux-gnu     # one
# Why not Debian's libcapnp-dev:arm64/armhf: its archives are -O2 and put most of an
# object's code in one .text section, so --gc-sections keeps whole objects (layout.o,
# arena.o, io.o, exception.o...) whose builders, readers and I/O the device uses a part of
# (docs/device-size.md); LTO then drops and inlines across Kestrel's calls (31 KB of the
# aarch64 runtime). It is built in lite mode (CAPNP_LITE: no reflection, and the generated
# code carries no schemas, 40 KB of the aarch64 runtime): rpc/src/schema_check.cpp walks
# frames with the layout tables of rpc/src/wire_layout.inc instead, on host and board
# alike; capnp_generate_cpp runs the host's /usr/bin/capnp (EXTERNAL_CAPNP). The native
# triple is the full build (scripts/build-device.sh native keeps the system's anyway).
#
# Idempotent: each prefix has a stamp naming the source version, the flags and the
# compiler; a prefix whose stamp differs is rebuilt from scratch (the stamp is written
# last, so an interrupted build is redone). The sources come from the configured mirror
# with `apt-get source` (scripts/debian-source.sh, retried when the mirror hiccups).
# Called by scripts/setup-cross.sh and, for the triple it builds, by
# scripts/build-device.sh; needs root for the default prefix, the cross compilers, cmake,
# ninja and dpkg-dev (installed when missing). About 3 minutes per triple on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/apt-retry.sh"
source "$here/debian-source.sh"
base="${KESTREL_CAPNP_ROOT:-/opt/kestrel}"
jobs="${KESTREL_JOBS:-2}"
flags="-Os -ffunction-sections -fdata-sections -flto -ffat-lto-objects"
if [ "$#" -eq 0 ]; then
  set -- aarch64-linux-gnu armv7a-linux-gnueabihf riscv64-linux-gnu
fi

compiler_of() {  # triple -> C++ compiler and its extra flags
  case "$1" in
    aarch64-linux-gnu) echo "aarch64-linux-gnu-g++" ;;
    armv7a-linux-gnueabihf) echo "arm-linux-gnueabihf-g++ -march=armv7-a -mfpu=neon -mfloat-abi=hard" ;;
    riscv64-linux-gnu) echo "riscv64-linux-gnu-g++" ;;
    native) echo "g++" ;;
    *) echo "build-capnp: unknown target '$1' (aarch64-linux-gnu, armv7a-linux-gnueabihf, riscv64-linux-gnu, native)" >&2
       return 2 ;;
  esac
}
lite_of() {  # triple -> ON where the build is in lite mode (every board)
  if [ "$1" = native ]; then echo OFF; else echo ON; fi
}
# The version this Debian offers (libcapnp-dev's, which `apt-get source` fetches).
version=$(apt-cache policy libcapnp-dev 2>/dev/null | awk '/Candidate/ {print $2}')
stamp_of() {  # triple -> the stamp its prefix must carry
  local cc
  cc=$(compiler_of "$1")
  echo "capnproto ${version:-unknown} flags $flags lite $(lite_of "$1") cc $cc $(${cc%% *} -dumpfullversion 2>/dev/null || true)"
}

pending_triples capnp "$base" .kestrel-capnp "$@" || exit 1
[ "${#todo[@]}" -gt 0 ] || exit 0

# What the build needs beyond the compilers (scripts/setup.sh and setup-cross.sh install
# them); the generated code of the schemas comes from the host's capnp.
install_build_tools capnp:capnproto || exit 1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
debian_source "$work" capnproto || exit 1
src=$(unpacked_source capnp capnproto "$version" CMakeLists.txt) || exit 1

for triple in "${todo[@]}"; do
  prefix="$base/capnp-$triple"
  cc=$(compiler_of "$triple")
  tools=""
  [ "$triple" = native ] || tools="${cc%%g++*}"
  cmake_install_triple capnp "$triple" "$prefix" CXX "$flags" \
    "set(CMAKE_AR ${tools}gcc-ar)" "set(CMAKE_RANLIB ${tools}gcc-ranlib)" -- \
    -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_TESTING=OFF -DBUILD_SHARED_LIBS=OFF -DWITH_OPENSSL=OFF -DWITH_ZLIB=OFF \
    -DEXTERNAL_CAPNP=ON "-DCAPNP_LITE=$(lite_of "$triple")"
  stamp_of "$triple" > "$prefix/.kestrel-capnp"
  echo "build-capnp: $triple done ($prefix: $(du -cb "$prefix"/lib/libcapnp.a "$prefix"/lib/libkj.a | awk 'END {print $1}') bytes of libcapnp.a and libkj.a)"
done
