# Cross build for 32-bit ARMv7 Linux with hard float (Raspberry Pi OS 32-bit).
# Needs crossbuild-essential-armhf, the multiarch libcapnp-dev:armhf (or the Cap'n Proto of
# scripts/build-capnp.sh) and the mbedTLS of scripts/build-mbedtls.sh (scripts/setup-cross.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR armv7-a)
set(CMAKE_C_COMPILER arm-linux-gnueabihf-gcc)
set(CMAKE_CXX_COMPILER arm-linux-gnueabihf-g++)
set(CMAKE_C_FLAGS_INIT "-march=armv7-a -mfpu=neon -mfloat-abi=hard")
set(CMAKE_CXX_FLAGS_INIT "-march=armv7-a -mfpu=neon -mfloat-abi=hard")
set(CMAKE_LIBRARY_ARCHITECTURE arm-linux-gnueabihf)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# The board's Cap'n Proto (Debian's source at -Os, one section per function):
# scripts/build-capnp.sh builds it into $KESTREL_CAPNP_ROOT/capnp-armv7a-linux-gnueabihf (default
# /opt/kestrel); found first when it is there (scripts/build-device.sh names it outright).
if(DEFINED ENV{KESTREL_CAPNP_ROOT})
  set(KESTREL_CAPNP_BOARD_PREFIX "$ENV{KESTREL_CAPNP_ROOT}/capnp-armv7a-linux-gnueabihf")
else()
  set(KESTREL_CAPNP_BOARD_PREFIX "/opt/kestrel/capnp-armv7a-linux-gnueabihf")
endif()
if(EXISTS "${KESTREL_CAPNP_BOARD_PREFIX}/.kestrel-capnp")
  list(PREPEND CMAKE_PREFIX_PATH "${KESTREL_CAPNP_BOARD_PREFIX}")
endif()
# The board's mbedTLS (a TLS 1.2 client only): scripts/build-mbedtls.sh builds it into
# $KESTREL_MBEDTLS_ROOT/mbedtls-armv7a-linux-gnueabihf (default /opt/kestrel); rpc/CMakeLists.txt links it.
if(NOT DEFINED KESTREL_MBEDTLS_PREFIX)
  if(DEFINED ENV{KESTREL_MBEDTLS_ROOT})
    set(KESTREL_MBEDTLS_PREFIX "$ENV{KESTREL_MBEDTLS_ROOT}/mbedtls-armv7a-linux-gnueabihf")
  else()
    set(KESTREL_MBEDTLS_PREFIX "/opt/kestrel/mbedtls-armv7a-linux-gnueabihf")
  endif()
endif()
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/arm-linux-gnueabihf/pkgconfig:/usr/share/pkgconfig")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-arm-static;-L;/usr/arm-linux-gnueabihf)
