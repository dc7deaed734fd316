# The layering as CMake sees it, written at configure time to <build>/layering.txt for
# scripts/layering.sh (which draws it) and tests/check_layering.sh (which refuses the
# edges that must not exist). One line per library target of the product (kestrel_*,
# outside tests/, bench/ and fuzz/) and per program (kestrel, kestrel-device, _kestrel):
#   <target> <TYPE> <libraries it links directly, space-separated>
# A library's direct links are its LINK_LIBRARIES (PUBLIC and PRIVATE alike); an
# INTERFACE library's (the wrappers of external libraries: kestrel_llvm, ...) are its
# INTERFACE_LINK_LIBRARIES.
# Call it once from the top-level CMakeLists.txt: the file is written at the end of that
# directory, after every target and every link of the tree is known.
function(kestrel_write_layering)
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL _kestrel_write_layering_now)
endfunction()

function(_kestrel_write_layering_now)
  set(dirs ${PROJECT_SOURCE_DIR})
  set(lines "")
  while(dirs)
    list(POP_FRONT dirs dir)
    get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
    list(APPEND dirs ${subdirs})
    file(RELATIVE_PATH relative ${PROJECT_SOURCE_DIR} ${dir})
    if(relative MATCHES "^(tests|bench|fuzz)(/|$)")
      continue()
    endif()
    get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target IN LISTS targets)
      if(NOT target MATCHES "^(kestrel_.*|kestrel|kestrel-device|_kestrel)$")
        continue()
      endif()
      get_target_property(type ${target} TYPE)
      if(type STREQUAL "UTILITY")
        continue()
      endif()
      if(type STREQUAL "INTERFACE_LIBRARY")
        get_target_property(links ${target} INTERFACE_LINK_LIBRARIES)
      else()
        get_target_property(links ${target} LINK_LIBRARIES)
      endif()
      if(NOT links)
        set(links "")
      endif()
      list(JOIN links " " links)
      string(APPEND lines "${target} ${type} ${links}\n")
    endforeach()
  endwhile()
  file(WRITE ${PROJECT_BINARY_DIR}/layering.txt "${lines}")
endfunction()
