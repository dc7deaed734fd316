# Cross build for 64-bit ARM Linux (Raspberry Pi 3/4/5 on a 64-bit OS, Jetson, phones).
# Needs crossbuild-essential-arm64, the multiarch libcapnp-dev:arm64 (or the Cap'n Proto of
# scripts/build-capnp.sh) and the mbedTLS of scripts/build-mbedtls.sh (scripts/setup-cross.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# The board's Cap'n Proto (Debian's source at -Os, one section per function):
# scripts/build-capnp.sh builds it into $KESTREL_CAPNP_ROOT/capnp-aarch64-linux-gnu (default
# /opt/kestrel); found first when it is there (scripts/build-device.sh names it outright).
if(DEFINED ENV{KESTREL_CAPNP_ROOT})
  set(KESTREL_CAPNP_BOARD_PREFIX "$ENV{KESTREL_CAPNP_ROOT}/capnp-aarch64-linux-gnu")
else()
  set(KESTREL_CAPNP_BOARD_PREFIX "/opt/kestrel/capnp-aarch64-linux-gnu")
endif()
if(EXISTS "${KESTREL_CAPNP_BOARD_PREFIX}/.kestrel-capnp")
  list(PREPEND CMAKE_PREFIX_PATH "${KESTREL_CAPNP_BOARD_PREFIX}")
endif()
# The board's mbedTLS (a TLS 1.2 client only): scripts/build-mbedtls.sh builds it into
# $KESTREL_MBEDTLS_ROOT/mbedtls-aarch64-linux-gnu (default /opt/kestrel); rpc/CMakeLists.txt links it.
if(NOT DEFINED KESTREL_MBEDTLS_PREFIX)
  if(DEFINED ENV{KESTREL_MBEDTLS_ROOT})
    set(KESTREL_MBEDTLS_PREFIX "$ENV{KESTREL_MBEDTLS_ROOT}/mbedtls-aarch64-linux-gnu")
  else()
    set(KESTREL_MBEDTLS_PREFIX "/opt/kestrel/mbedtls-aarch64-linux-gnu")
  endif()
endif()
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static;-L;/usr/aarch64-linux-gnu)
