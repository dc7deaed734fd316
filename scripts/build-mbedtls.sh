#!/usr/bin/env bash
# Builds the boards' mbedTLS: Debian's own mbedTLS 2.28 source package (the version of
# libmbedtls-dev), configured by cmake/mbedtls/kestrel_mbedtls_config.h (a TLS 1.2 client
# with the six suites of docs/security.md and nothing else), compiled with -Os
# -ffunction-sections -fdata-sections, without unwind tables (C code: no exception passes
# through it, as the runtime's callbacks are noexcept) and as GCC LTO objects (-flto
# -ffat-lto-objects: the device's LTO link compiles it with Kestrel's code; the fat objects
# also serve a link without LTO), static and position independent, for each triple
# given (default: every board triple and native, the x86_64 build that
# tests/check_mbedtls_interop.sh runs against the host's tracker), into
# $KESTREL_MBEDTLS_ROOT/mbedtls-<triple> (default /opt/kestrel/mbedtls-<triple>).
# The configuration is installed as the prefix's include/mbedtls/config.h, so the runtime's
# sources are compiled against the same options as the library. scripts/build-device.sh
# links it (KESTREL_MBEDTLS_PREFIX); the host build keeps OpenSSL.
#   scripts/build-mbedtls.sh                       # aarch64, armv7a, riscv64, native
#   scripts/build-mbedtls.sh aarch64-linux-gnu     # one
# Why not Debian's libmbedtls-dev: its archives have every feature on (the TLS server,
# DES, Camellia, ARIA, Blowfish, MD2/MD4, RIPEMD-160, the self-tests and test
# certificates) and no -ffunction-sections, so whole objects came into the board binary
# (500 KB of the aarch64 runtime; docs/device-size.md).
#
# Idempotent: each prefix has a stamp naming the source version, a hash of the
# configuration header, the flags and the compiler; a prefix whose stamp differs is
# rebuilt from scratch (the stamp is written last, so an interrupted build is redone).
# The sources come from the configured mirror with `apt-get source` (scripts/debian-source.sh,
# retried when the mirror hiccups). Called by scripts/setup-cross.sh and, for the triple
# it builds, by scripts/build-device.sh; needs root for the default prefix, the cross
# compilers, cmake, ninja and dpkg-dev (installed when missing). About 10 seconds per
# triple on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/apt-retry.sh"
source "$here/debian-source.sh"
config="$(cd "$here/.." && pwd)/cmake/mbedtls/kestrel_mbedtls_config.h"
base="${KESTREL_MBEDTLS_ROOT:-/opt/kestrel}"
jobs="${KESTREL_JOBS:-2}"
flags="-Os -ffunction-sections -fdata-sections -fno-asynchronous-unwind-tables -fno-unwind-tables -flto -ffat-lto-objects"
if [ "$#" -eq 0 ]; then
  set -- aarch64-linux-gnu armv7a-linux-gnueabihf riscv64-linux-gnu native
fi

compiler_of() {  # triple -> C compiler and its extra flags
  case "$1" in
    aarch64-linux-gnu) echo "aarch64-linux-gnu-gcc" ;;
    armv7a-linux-gnueabihf) echo "arm-linux-gnueabihf-gcc -march=armv7-a -mfpu=neon -mfloat-abi=hard" ;;
    riscv64-linux-gnu) echo "riscv64-linux-gnu-gcc" ;;
    native) echo "gcc" ;;
    *) echo "build-mbedtls: unknown target '$1' (aarch64-linux-gnu, armv7a-linux-gnueabihf, riscv64-linux-gnu, native)" >&2
       return 2 ;;
  esac
}
# The version this Debian offers (libmbedtls-dev's, which `apt-get source` fetches).
version=$(apt-cache policy libmbedtls-dev 2>/dev/null | awk '/Candidate/ {print $2}')
config_hash=$(sha256sum "$config" | cut -c1-16)
stamp_of() {  # triple -> the stamp its prefix must carry
  local cc
  cc=$(compiler_of "$1")
  echo "mbedtls ${version:-unknown} config $config_hash flags $flags cc $cc $(${cc%% *} -dumpfullversion 2>/dev/null || true)"
}

pending_triples mbedtls "$base" .kestrel-mbedtls "$@" || exit 1
[ "${#todo[@]}" -gt 0 ] || exit 0

# What the build needs beyond the compilers (scripts/setup.sh and setup-cross.sh install
# them; `scripts/build-device.sh native` can come here without setup-cross.sh).
install_build_tools || exit 1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
debian_source "$work" mbedtls || exit 1
src=$(unpacked_source mbedtls mbedtls "$version" include/mbedtls/config.h) || exit 1
# Kestrel's configuration replaces the default one: the library and the installed headers
# both see it.
cp "$config" "$src/include/mbedtls/config.h"

for triple in "${todo[@]}"; do
  prefix="$base/mbedtls-$triple"
  cc=$(compiler_of "$triple")
  tools=""
  [ "$triple" = native ] || tools="${cc%%gcc*}"
  cmake_install_triple mbedtls "$triple" "$prefix" C "$flags" \
    "set(CMAKE_AR ${tools}gcc-ar)" "set(CMAKE_RANLIB ${tools}gcc-ranlib)" -- \
    -DLIB_INSTALL_DIR=lib -DENABLE_PROGRAMS=OFF -DENABLE_TESTING=OFF -DMBEDTLS_FATAL_WARNINGS=OFF \
    -DUSE_SHARED_MBEDTLS_LIBRARY=OFF -DUSE_STATIC_MBEDTLS_LIBRARY=ON
  stamp_of "$triple" > "$prefix/.kestrel-mbedtls"
  echo "build-mbedtls: $triple done ($prefix: $(du -cb "$prefix"/lib/libmbed*.a | awk 'END {print $1}') bytes of archives)"
done
