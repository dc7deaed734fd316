#!/usr/bin/env bash
# Installs what cross builds of the device runtime need: the aarch64, armhf and riscv64
# cross compilers, qemu user-mode emulation, and the arm64/armhf builds of Cap'n Proto,
# libsodium and OpenSSL (Debian multiarch). Debian 12 has no riscv64
# architecture, so the riscv64 builds of those libraries are compiled from Debian's source
# packages by scripts/build-riscv64-deps.sh (about 2 minutes, once). The boards' TLS,
# mbedTLS, is built from Debian's source package too, client-only, for every board triple
# (scripts/build-mbedtls.sh, seconds per triple, once), and so is their Cap'n Proto, at
# -Os with one section per function (scripts/build-capnp.sh, minutes per triple, once;
# the host's capnp compiler generates the code).
# Idempotent. Needs root (or sudo).
#
# Multiarch packages must have the same version on every architecture. Debian's security
# archive can carry a newer libssl3 for amd64 than the main archive has for arm64/armhf
# (libcapnp depends on libssl3), so libssl is pinned to the version all of them offer.
set -euo pipefail
source "$(dirname "$0")/apt-retry.sh"

# The riscv64 libraries (scripts/build-riscv64-deps.sh). Their sources come from the
# package mirror too; when it cannot give them, the riscv64 board is left out (its test
# reports itself skipped) and the other boards go on.
riscv64_deps() {
  if ! "$(dirname "$0")/build-riscv64-deps.sh"; then
    echo "setup-cross: the riscv64 libraries could not be built: the riscv64 board is left out" >&2
  fi
}
# The boards' mbedTLS (scripts/build-mbedtls.sh: a TLS 1.2 client built from Debian's
# source with cmake/mbedtls/kestrel_mbedtls_config.h), for aarch64, armv7a and native
# (the x86_64 build of the interop test), then riscv64 (left out with its board when its
# compiler or the sources cannot be had, as above). Idempotent: seconds per triple, once.
board_mbedtls() {
  "$(dirname "$0")/build-mbedtls.sh" aarch64-linux-gnu armv7a-linux-gnueabihf native
  if ! "$(dirname "$0")/build-mbedtls.sh" riscv64-linux-gnu; then
    echo "setup-cross: the riscv64 mbedTLS could not be built: the riscv64 board is left out" >&2
  fi
}
# The boards' Cap'n Proto (scripts/build-capnp.sh: Debian's source at -Os with one section
# per function), per board triple; a board whose Cap'n Proto cannot be built (the mirror
# cannot give the source) is left out: scripts/test.sh does not build it and its board
# test reports itself skipped. Idempotent: a few minutes per triple, once.
board_capnp() {
  local triple
  for triple in aarch64-linux-gnu armv7a-linux-gnueabihf riscv64-linux-gnu; do
    if ! "$(dirname "$0")/build-capnp.sh" "$triple"; then
      echo "setup-cross: the $triple Cap'n Proto could not be built: the $triple board is left out" >&2
    fi
  done
}

if command -v aarch64-linux-gnu-g++ > /dev/null && command -v arm-linux-gnueabihf-g++ > /dev/null &&
   command -v qemu-aarch64-static > /dev/null && [ -f /usr/lib/aarch64-linux-gnu/libcapnp.a ] &&
   [ -f /usr/lib/arm-linux-gnueabihf/libcapnp.a ] && [ -f /usr/lib/aarch64-linux-gnu/libsodium.a ] &&
   [ -f /usr/lib/arm-linux-gnueabihf/libsodium.a ] &&
   [ -f /usr/lib/aarch64-linux-gnu/libssl.a ] && [ -f /usr/lib/arm-linux-gnueabihf/libssl.a ] &&
   command -v riscv64-linux-gnu-g++ > /dev/null &&
   command -v autoreconf > /dev/null && command -v libtoolize > /dev/null && command -v dpkg-source > /dev/null &&
   command -v cmake > /dev/null && command -v ninja > /dev/null; then
  riscv64_deps
  board_mbedtls
  board_capnp
  echo "setup-cross: all present"
  exit 0
fi

for arch in arm64 armhf; do
  dpkg --print-foreign-architectures | grep -qx "$arch" || $SUDO dpkg --add-architecture "$arch"
done
apt_update

# True when every one of the given package:arch names is offered at version $1.
offered_everywhere() {
  local version="$1" pkg
  shift
  for pkg in "$@"; do
    apt-cache madison "$pkg" 2>/dev/null | awk -F'|' '{gsub(/ /, "", $2); print $2}' |
      grep -qxF "$version" || return 1
  done
}

# Prefer the libssl3 the host already has (no downgrade) when the foreign archives offer
# it too; otherwise the version the arm64 archive offers.
ssl=$(dpkg-query -W -f='${Version}' libssl3 2>/dev/null || true)
if [ -z "$ssl" ] || ! offered_everywhere "$ssl" libssl3:arm64 libssl3:armhf libssl-dev:amd64 \
                                               libssl-dev:arm64 libssl-dev:armhf; then
  ssl=$(apt-cache policy libssl3:arm64 | awk '/Candidate/ {print $2}')
fi
if [ -z "$ssl" ] || [ "$ssl" = "(none)" ]; then
  echo "setup-cross: no libssl3 for arm64 in the package archive" >&2
  exit 1
fi
echo "setup-cross: libssl3 at $ssl on amd64, arm64 and armhf (installed on the host: $(dpkg-query -W -f='${Version}' libssl3 2>/dev/null || echo none))"
apt_install --allow-downgrades \
  "libssl3=$ssl" "libssl-dev=$ssl" "libssl3:arm64=$ssl" "libssl3:armhf=$ssl" \
  "libssl-dev:arm64=$ssl" "libssl-dev:armhf=$ssl" \
  crossbuild-essential-arm64 crossbuild-essential-armhf qemu-user-static \
  libcapnp-dev:arm64 libcapnp-dev:armhf libsodium-dev:arm64 libsodium-dev:armhf \
  libstdc++6:arm64 libstdc++6:armhf \
  ninja-build cmake g++-riscv64-linux-gnu autoconf automake libtool dpkg-dev
# riscv64: no multiarch packages in Debian 12; the libraries built from Debian's sources.
riscv64_deps
board_mbedtls
board_capnp
echo "setup-cross: done"
