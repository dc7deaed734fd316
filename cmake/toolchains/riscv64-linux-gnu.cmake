# Cross build for 64-bit RISC-V Linux (VisionFive 2, Milk-V, LicheePi 4A: RV64GC, lp64d).
# Needs gcc/g++-riscv64-linux-gnu and the riscv64 libraries that scripts/build-riscv64-deps.sh
# builds from Debian's sources into KESTREL_RISCV64_PREFIX (Debian 12 has no riscv64
# multiarch packages); scripts/setup-cross.sh does both.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR riscv64)
set(CMAKE_C_COMPILER riscv64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER riscv64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE riscv64-linux-gnu)
if(DEFINED ENV{KESTREL_RISCV64_PREFIX})
  set(KESTREL_RISCV64_PREFIX "$ENV{KESTREL_RISCV64_PREFIX}")
else()
  set(KESTREL_RISCV64_PREFIX "/opt/kestrel/riscv64-linux-gnu")
endif()
# The prefix first: CapnProto's package (its libraries for riscv64, the host's capnp
# tool), libsodium; mbedTLS from its own prefix (below).
# Headers only (Asio) still come from /usr/include.
list(PREPEND CMAKE_PREFIX_PATH "${KESTREL_RISCV64_PREFIX}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# The board's Cap'n Proto (Debian's source at -Os, one section per function):
# scripts/build-capnp.sh builds it into $KESTREL_CAPNP_ROOT/capnp-riscv64-linux-gnu (default
# /opt/kestrel); found first when it is there (scripts/build-device.sh names it outright).
if(DEFINED ENV{KESTREL_CAPNP_ROOT})
  set(KESTREL_CAPNP_BOARD_PREFIX "$ENV{KESTREL_CAPNP_ROOT}/capnp-riscv64-linux-gnu")
else()
  set(KESTREL_CAPNP_BOARD_PREFIX "/opt/kestrel/capnp-riscv64-linux-gnu")
endif()
if(EXISTS "${KESTREL_CAPNP_BOARD_PREFIX}/.kestrel-capnp")
  list(PREPEND CMAKE_PREFIX_PATH "${KESTREL_CAPNP_BOARD_PREFIX}")
endif()
# The board's mbedTLS (a TLS 1.2 client only): scripts/build-mbedtls.sh builds it into
# $KESTREL_MBEDTLS_ROOT/mbedtls-riscv64-linux-gnu (default /opt/kestrel); rpc/CMakeLists.txt links it.
if(NOT DEFINED KESTREL_MBEDTLS_PREFIX)
  if(DEFINED ENV{KESTREL_MBEDTLS_ROOT})
    set(KESTREL_MBEDTLS_PREFIX "$ENV{KESTREL_MBEDTLS_ROOT}/mbedtls-riscv64-linux-gnu")
  else()
    set(KESTREL_MBEDTLS_PREFIX "/opt/kestrel/mbedtls-riscv64-linux-gnu")
  endif()
endif()
set(ENV{PKG_CONFIG_LIBDIR} "${KESTREL_RISCV64_PREFIX}/lib/pkgconfig:/usr/share/pkgconfig")
# No libc6:riscv64 in Debian 12: the cross toolchain's sysroot is the board's root.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-riscv64-static;-L;/usr/riscv64-linux-gnu)
