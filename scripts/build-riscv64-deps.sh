#!/usr/bin/env bash
# Builds the riscv64 libraries the device runtime links (Cap'n Proto 0.9.2, libsodium
# 1.0.18; mbedTLS, as for every board, comes from scripts/build-mbedtls.sh; the worker's
# seccomp filter is Kestrel's own) from Debian's own source packages, cross-compiled
# with gcc-riscv64-linux-gnu into $KESTREL_RISCV64_PREFIX (default /opt/kestrel/riscv64-linux-gnu),
# where cmake/toolchains/riscv64-linux-gnu.cmake finds them.
#
# Why from source: Debian 12 (bookworm) has no riscv64 architecture (its Release file
# lists amd64 arm64 armel armhf i386 mips64el mipsel ppc64el s390x; riscv64 became a
# release architecture with Debian 13), so `libcapnp-dev:riscv64` and the others cannot be
# installed by multiarch as for arm64/armhf. Only the cross compiler and the cross C
# library (libc6-dev-riscv64-cross) are packaged. The sources are the same versions the
# amd64/arm64 builds use, fetched with `apt-get source` from the configured mirror through
# a private source list (scripts/debian-source.sh: the system's apt configuration is not
# changed). The libraries are static and position independent. libsodium is there only
# because cmake/KestrelDeps.cmake requires it in every build (the board runtime links none of it).
#
# Idempotent (a stamp in the prefix); called by scripts/setup-cross.sh. Needs root for
# the default prefix, and autoconf, automake, libtool, dpkg-dev (setup-cross.sh
# installs them). About 3 minutes on 2 cores.
set -euo pipefail
source "$(dirname "$0")/apt-retry.sh"
source "$(dirname "$0")/debian-source.sh"
prefix="${KESTREL_RISCV64_PREFIX:-/opt/kestrel/riscv64-linux-gnu}"
stamp="$prefix/.kestrel-deps"
packages=(capnproto libsodium)
# A prefix built before mbedTLS moved to scripts/build-mbedtls.sh also has Debian's full
# mbedTLS, and one built before the worker's filter became Kestrel's own has libseccomp:
# the rest is still right, those are removed so that nothing links them.
if [ -f "$stamp" ] && { [ "$(cat "$stamp")" = "capnproto mbedtls libseccomp libsodium" ] ||
                        [ "$(cat "$stamp")" = "capnproto libseccomp libsodium" ]; }; then
  rm -rf "$prefix/include/mbedtls" "$prefix/include/psa" "$prefix/lib/libmbedtls.a" "$prefix/lib/libmbedx509.a" \
         "$prefix/lib/libmbedcrypto.a" "$prefix/include/seccomp.h" "$prefix/include/seccomp-syscalls.h" \
         "$prefix/lib/libseccomp.a" "$prefix/lib/libseccomp.la" "$prefix/lib/pkgconfig/libseccomp.pc"
  echo "${packages[*]}" > "$stamp"
fi
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${packages[*]}" ]; then
  echo "build-riscv64-deps: present in $prefix"
  exit 0
fi
jobs="${KESTREL_JOBS:-2}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The source packages, from the mirrors apt already uses (scripts/debian-source.sh).
debian_source "$work" "${packages[@]}" || exit 1

src="$work/src"
export CFLAGS="-O2" CXXFLAGS="-O2"
cat > "$work/toolchain.cmake" << 'EOF'
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR riscv64)
set(CMAKE_C_COMPILER riscv64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER riscv64-linux-gnu-g++)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
EOF
cmake_args=(-G Ninja -DCMAKE_TOOLCHAIN_FILE="$work/toolchain.cmake" -DCMAKE_BUILD_TYPE=None
             -DCMAKE_INSTALL_PREFIX="$prefix")
log="$work/build.log"
step() {  # name command...
  local name=$1
  shift
  echo "build-riscv64-deps: $name"
  "$@" >> "$log" 2>&1 || { tail -30 "$log" >&2; echo "build-riscv64-deps: $name failed" >&2; exit 1; }
}
mkdir -p "$prefix"

# Cap'n Proto: the libraries and CMake package for riscv64; capnp_generate_cpp runs the
# host's /usr/bin/capnp (EXTERNAL_CAPNP), which is the same version.
step "capnproto: configure" cmake -S "$(echo "$src"/capnproto-*/)" -B "$work/capnp" "${cmake_args[@]}" \
  -DBUILD_TESTING=OFF -DBUILD_SHARED_LIBS=OFF -DWITH_OPENSSL=OFF -DWITH_ZLIB=OFF -DEXTERNAL_CAPNP=ON
step "capnproto: build" cmake --build "$work/capnp" -j "$jobs"
step "capnproto: install" cmake --install "$work/capnp"

# libsodium (Debian's source has no configure: autogen needs autoconf, automake, libtool).
cd "$(echo "$src"/libsodium-*/)"
step "libsodium: autogen" ./autogen.sh -s
step "libsodium: configure" ./configure --host=riscv64-linux-gnu --prefix="$prefix" --libdir="$prefix/lib" \
  --disable-shared --enable-static --with-pic
step "libsodium: build" make -j "$jobs"
step "libsodium: install" make install

echo "${packages[*]}" > "$stamp"
echo "build-riscv64-deps: done ($prefix)"
