# Third-party dependencies, found once for the whole tree. Every package here is
# installed by scripts/setup.sh.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)

# Standalone Asio is header-only and ships no CMake config.
find_path(ASIO_INCLUDE_DIR asio.hpp REQUIRED)
add_library(kestrel_asio INTERFACE)
target_include_directories(kestrel_asio SYSTEM INTERFACE ${ASIO_INCLUDE_DIR})
target_compile_definitions(kestrel_asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED)
target_link_libraries(kestrel_asio INTERFACE Threads::Threads)

find_package(CapnProto CONFIG REQUIRED)

# KESTREL_STATIC_RUNTIME: the device runtime carries capnp/kj and its TLS library itself,
# so a board needs nothing but its C library and C++ runtime (libc.so.6, libstdc++.so.6,
# libgcc_s.so.1: one file to copy).
option(KESTREL_STATIC_RUNTIME "Link kestrel-device statically except for the C and C++ runtimes" OFF)
# KESTREL_FULLY_STATIC: libc too, for boards whose C library is not glibc (Android's
# bionic): the runtime needs nothing at all. Kernel modules still load (they carry their
# own memcpy/memset, see kernel/abi.h); host names are resolved without NSS, so give the
# tracker as a numeric address there.
option(KESTREL_FULLY_STATIC "Link kestrel-device fully statically (libc included)" OFF)
if(KESTREL_FULLY_STATIC)
  set(KESTREL_STATIC_RUNTIME ON CACHE BOOL "" FORCE)
endif()
add_library(kestrel_capnp INTERFACE)
if(KESTREL_STATIC_RUNTIME)
  find_library(KESTREL_CAPNP_STATIC NAMES libcapnp.a REQUIRED)
  find_library(KESTREL_KJ_STATIC NAMES libkj.a REQUIRED)
  get_target_property(_capnp_includes CapnProto::capnp INTERFACE_INCLUDE_DIRECTORIES)
  target_include_directories(kestrel_capnp SYSTEM INTERFACE ${_capnp_includes})
  target_link_libraries(kestrel_capnp INTERFACE ${KESTREL_CAPNP_STATIC} ${KESTREL_KJ_STATIC} Threads::Threads)
else()
  target_link_libraries(kestrel_capnp INTERFACE CapnProto::capnp CapnProto::kj)
endif()
# Cap'n Proto in lite mode (the boards' build of scripts/build-capnp.sh): no reflection,
# no schemas in the generated code; everything compiled against it must say so. Its
# package marks kj with CAPNP_LITE, which the archives linked by path above do not carry.
get_target_property(_kj_definitions CapnProto::kj INTERFACE_COMPILE_DEFINITIONS)
if(_kj_definitions MATCHES "CAPNP_LITE")
  set(KESTREL_CAPNP_LITE ON)
  target_compile_definitions(kestrel_capnp INTERFACE CAPNP_LITE=1)
else()
  set(KESTREL_CAPNP_LITE OFF)
endif()

# libsodium: linked statically so the device runtime carries only the few
# primitives it uses (HMAC-SHA256, random bytes) and needs no extra shared library.
pkg_check_modules(SODIUM REQUIRED libsodium)
find_library(SODIUM_STATIC_LIBRARY NAMES libsodium.a PATHS ${SODIUM_LIBRARY_DIRS})
add_library(kestrel_sodium INTERFACE)
target_include_directories(kestrel_sodium SYSTEM INTERFACE ${SODIUM_INCLUDE_DIRS})
if(SODIUM_STATIC_LIBRARY)
  target_link_libraries(kestrel_sodium INTERFACE ${SODIUM_STATIC_LIBRARY})
else()
  target_link_libraries(kestrel_sodium INTERFACE ${SODIUM_LINK_LIBRARIES})
endif()

find_package(nlohmann_json 3 QUIET)
# Command-line parsing of the kestrel subcommands (header-only).
find_package(CLI11 2 CONFIG QUIET)

# Tuner: XGBoost's C API (its CMake config needs the xgboost CLI package, so find the
# header and library directly) and SQLite for the records database.
find_path(XGBOOST_INCLUDE_DIR xgboost/c_api.h)
find_library(XGBOOST_LIBRARY xgboost)
find_package(SQLite3)
# libpq (libpq-dev) for records on PostgreSQL (tuner/src/pg_records.cpp).
pkg_check_modules(LIBPQ QUIET IMPORTED_TARGET libpq)
if(XGBOOST_INCLUDE_DIR AND XGBOOST_LIBRARY)
  add_library(kestrel_xgboost INTERFACE)
  target_include_directories(kestrel_xgboost SYSTEM INTERFACE ${XGBOOST_INCLUDE_DIR})
  target_link_libraries(kestrel_xgboost INTERFACE ${XGBOOST_LIBRARY})
endif()

# Model import: ONNX's C++ library (protobuf schema, checker, shape inference) from
# libonnx-dev; its CMake config defines the targets onnx and onnx_proto.
find_package(Protobuf QUIET)
find_package(ONNX CONFIG QUIET)

# Optional: the libraries `kestrel bench` compares Kestrel's kernels with. OpenBLAS
# (libopenblas-dev, pkg-config module openblas) and oneDNN (libdnnl-dev; Debian builds it
# on OpenMP, whose omp_set_num_threads sets its thread count).
option(KESTREL_BENCH_LIBRARIES "Let kestrel bench use OpenBLAS and oneDNN when they are installed" ON)
if(KESTREL_BENCH_LIBRARIES)
  pkg_check_modules(OPENBLAS QUIET openblas)
  find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
  find_library(DNNL_LIBRARY dnnl)
  find_package(OpenMP QUIET COMPONENTS CXX)
endif()
set(KESTREL_HAVE_OPENBLAS OFF)
if(OPENBLAS_FOUND)
  set(KESTREL_HAVE_OPENBLAS ON)
  add_library(kestrel_openblas INTERFACE)
  target_include_directories(kestrel_openblas SYSTEM INTERFACE ${OPENBLAS_INCLUDE_DIRS})
  target_link_directories(kestrel_openblas INTERFACE ${OPENBLAS_LIBRARY_DIRS})
  target_link_libraries(kestrel_openblas INTERFACE ${OPENBLAS_LIBRARIES})
  message(STATUS "kestrel bench: comparing with OpenBLAS ${OPENBLAS_VERSION}")
else()
  message(STATUS "kestrel bench: no OpenBLAS (install libopenblas-dev to compare with it; KESTREL_BENCH_LIBRARIES=${KESTREL_BENCH_LIBRARIES})")
endif()
set(KESTREL_HAVE_ONEDNN OFF)
if(KESTREL_BENCH_LIBRARIES AND DNNL_INCLUDE_DIR AND DNNL_LIBRARY AND OpenMP_CXX_FOUND)
  set(KESTREL_HAVE_ONEDNN ON)
  add_library(kestrel_onednn INTERFACE)
  target_include_directories(kestrel_onednn SYSTEM INTERFACE ${DNNL_INCLUDE_DIR})
  target_link_libraries(kestrel_onednn INTERFACE ${DNNL_LIBRARY} OpenMP::OpenMP_CXX)
  message(STATUS "kestrel bench: comparing with oneDNN (${DNNL_LIBRARY})")
else()
  message(STATUS "kestrel bench: no oneDNN (install libdnnl-dev to compare with it; KESTREL_BENCH_LIBRARIES=${KESTREL_BENCH_LIBRARIES})")
endif()
