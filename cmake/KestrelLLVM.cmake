# LLVM, Clang and LLD 19 for the host's in-process kernel compiler. Included only by
# host/CMakeLists.txt: nothing the device runtime links may depend on these targets.
#
# Every package is pinned to /usr/lib/llvm-19 with NO_DEFAULT_PATH: Debian also ships
# LLVM 14, and a default search mixes the two. find_package(LLVM 19) rejects 19.1.7
# (the config's version file wants an exact 19.0), so the major version is checked
# after the fact instead.
#
# Defines the INTERFACE target kestrel_llvm: LLVM and Clang as shared libraries
# (libLLVM-19.so, libclang-cpp.so.19.1: fast links) plus LLD's static ELF driver.
include_guard(GLOBAL)

set(KESTREL_LLVM_ROOT "/usr/lib/llvm-19" CACHE PATH "Root of the LLVM 19 installation")

find_package(LLVM CONFIG REQUIRED PATHS "${KESTREL_LLVM_ROOT}/lib/cmake/llvm" NO_DEFAULT_PATH)
if(NOT LLVM_VERSION_MAJOR EQUAL 19)
  message(FATAL_ERROR "kestrel needs LLVM 19, found ${LLVM_PACKAGE_VERSION} in ${LLVM_DIR} "
    "(install llvm-19-dev, see scripts/setup.sh)")
endif()
if(NOT LLVM_LINK_LLVM_DYLIB)
  message(FATAL_ERROR "the LLVM 19 in ${LLVM_DIR} has no libLLVM shared library")
endif()
find_package(Clang CONFIG REQUIRED PATHS "${KESTREL_LLVM_ROOT}/lib/cmake/clang" NO_DEFAULT_PATH)
find_package(LLD CONFIG REQUIRED PATHS "${KESTREL_LLVM_ROOT}/lib/cmake/lld" NO_DEFAULT_PATH)
message(STATUS "kestrel: LLVM ${LLVM_PACKAGE_VERSION} (${LLVM_DIR})")

# The clang driver derives its resource directory (stddef.h, stdint.h, the freestanding
# headers every kernel includes) from the path it is told it runs from.
set(KESTREL_CLANG_PATH "${LLVM_TOOLS_BINARY_DIR}/clang")
if(NOT EXISTS "${LLVM_LIBRARY_DIR}/clang/${LLVM_VERSION_MAJOR}/include/stdint.h")
  message(FATAL_ERROR "clang's resource headers are missing from "
    "${LLVM_LIBRARY_DIR}/clang/${LLVM_VERSION_MAJOR}/include (install libclang-common-19-dev)")
endif()

add_library(kestrel_llvm INTERFACE)
# SYSTEM: LLVM's headers are not clean under the project's warning set.
target_include_directories(kestrel_llvm SYSTEM INTERFACE
  ${LLVM_INCLUDE_DIRS} ${CLANG_INCLUDE_DIRS} ${LLD_INCLUDE_DIRS})
separate_arguments(_kestrel_llvm_defs NATIVE_COMMAND "${LLVM_DEFINITIONS}")
target_compile_definitions(kestrel_llvm INTERFACE ${_kestrel_llvm_defs})
# clang-cpp: libclang-cpp.so. Toolchain fact: a process that has libclang-cpp loaded
# crashes inside PoCL on its first OpenCL call (clang's unversioned symbols override
# PoCL's own clang), so a process linking kestrel_host must never load OpenCL/PoCL.
# The device runtime (which runs OpenCL kernels) never links this library; a test
# checks it (tests/check_device_deps.sh).
# LLVM: libLLVM-19.so. lldELF/lldCommon: static archives, built against that dylib.
target_link_libraries(kestrel_llvm INTERFACE lldELF lldCommon clang-cpp LLVM)
