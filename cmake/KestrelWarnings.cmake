# kestrel_warnings(target): the project's warning set, errors when KESTREL_WERROR is on.
function(kestrel_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
    -Wnon-virtual-dtor -Wcast-align -Woverloaded-virtual -Wimplicit-fallthrough)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 misreports Asio's coroutine frame allocator as mismatched new/delete.
    target_compile_options(${target} PRIVATE -Wno-mismatched-new-delete)
  endif()
  if(KESTREL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
