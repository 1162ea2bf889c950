# Helpers shared by every folder's CMakeLists.txt.
#
#   trellis_library(NAME SRCS a.cc ... [DEPS trellis::x ...] [PRIVATE_DEPS ...] [TORCH])
#     makes the static library trellis_NAME with the alias trellis::NAME.
#     TORCH links LibTorch privately and reuses one precompiled <torch/torch.h>.
#   trellis_test(NAME SRCS a_test.cc ... [DEPS ...] [TORCH] [LABELS ...]
#                [BINARY] [SOURCE_DIR])
#     makes a GoogleTest binary registered with CTest. BINARY: the test runs
#     the trellis command, named by TRELLIS_BINARY and built before it;
#     SOURCE_DIR: TRELLIS_SOURCE_DIR names the source tree (fixtures,
#     examples). A test labelled gpu
#     whose every case skipped (no CUDA device) is reported as skipped.

# One precompiled header for every target that includes LibTorch: the
# torch headers cost ~20 s per translation unit on this machine otherwise.
# GCC uses a PCH only where the macros match. Every target that links gRPC
# gets -pthread from it (re2::re2), which defines _REENTRANT; so the PCH and
# every torch target are compiled -pthread, gRPC or not (-Winvalid-pch,
# which CMake adds, names any translation unit that still misses the PCH).
add_library(trellis_torch_pch STATIC ${CMAKE_CURRENT_LIST_DIR}/torch_pch.cc)
target_link_libraries(trellis_torch_pch PUBLIC ${TORCH_LIBRARIES})
target_compile_options(trellis_torch_pch PUBLIC ${TORCH_CXX_FLAGS} -pthread)
target_precompile_headers(trellis_torch_pch PRIVATE <torch/torch.h>)
# Loading that header costs a translation unit ~6 CPU-seconds even when it
# uses none of it, so only the sources that include LibTorch (themselves or
# through a Trellis header: cmake/torch_sources.py) get it; the others of a
# torch target compile without (docs/build.md). A source that starts
# including LibTorch after the last configure is still correct, only slower,
# until CMake runs again.
execute_process(COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/torch_sources.py ${PROJECT_SOURCE_DIR}
                OUTPUT_VARIABLE TRELLIS_TORCH_SOURCES COMMAND_ERROR_IS_FATAL ANY)
string(REPLACE "\n" ";" TRELLIS_TORCH_SOURCES "${TRELLIS_TORCH_SOURCES}")

# Unity builds: each target's sources are compiled in batches of up to
# TRELLIS_UNITY_BATCH, one translation unit a batch that #includes them, so
# the headers they share (LibTorch's precompiled one above all) are loaded
# once a batch, not once a source (docs/build.md). The sources that include
# LibTorch and those that do not go in separate batches, and only the former
# get the precompiled header: CMake's own UNITY_BUILD gives a target's
# precompiled header to every batch, whatever SKIP_PRECOMPILE_HEADERS its
# sources have, so the batches are made here. A batch recompiles when any
# of its sources changes. TRELLIS_UNITY_BATCH=1 compiles every source alone.
# A source set SKIP_UNITY_BUILD_INCLUSION, or given COMPILE_DEFINITIONS or
# COMPILE_OPTIONS of its own, before its target is made stays out of the
# batches and compiles alone, as CMake's unity builds do.
set(TRELLIS_UNITY_BATCH 8 CACHE STRING "Sources per unity translation unit (1: no batching)")

function(_trellis_unity_batches target kind sources)
  list(LENGTH sources count)
  if(count EQUAL 0)
    return()
  endif()
  math(EXPR batches "(${count} + ${TRELLIS_UNITY_BATCH} - 1) / ${TRELLIS_UNITY_BATCH}")
  set(first 0)
  foreach(batch RANGE 1 ${batches})
    # Even batches: the first `batch` of them hold count * batch / batches sources.
    math(EXPR end "${count} * ${batch} / ${batches}")
    set(content "/* cmake/trellis.cmake: ${target}'s unity batch ${kind} ${batch} */\n")
    foreach(index RANGE ${first} ${end})
      if(index LESS end)
        list(GET sources ${index} source)
        string(APPEND content "#include \"${source}\"\n")
      endif()
    endforeach()
    set(first ${end})
    set(unity ${CMAKE_CURRENT_BINARY_DIR}/unity/${target}_${kind}_${batch}.cc)
    file(CONFIGURE OUTPUT ${unity} CONTENT "${content}")
    target_sources(${target} PRIVATE ${unity})
    if(kind STREQUAL "plain")
      set_source_files_properties(${unity} TARGET_DIRECTORY ${target} PROPERTIES
                                  SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endforeach()
endfunction()

# TORCH: the target reuses LibTorch's precompiled header, which only its
# batches of sources that include LibTorch get.
function(_trellis_unity target)
  cmake_parse_arguments(ARG "TORCH" "" "" ${ARGN})
  get_target_property(sources ${target} SOURCES)
  set(torch "")
  set(plain "")
  foreach(source IN LISTS sources)
    cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} OUTPUT_VARIABLE path)
    if(NOT path MATCHES "\\.cc$" OR NOT EXISTS ${path})
      continue()
    endif()
    set(torch_source FALSE)
    if(ARG_TORCH AND path IN_LIST TRELLIS_TORCH_SOURCES)
      set(torch_source TRUE)
    endif()
    get_source_file_property(skip ${source} TARGET_DIRECTORY ${target} SKIP_UNITY_BUILD_INCLUSION)
    get_source_file_property(definitions ${source} TARGET_DIRECTORY ${target} COMPILE_DEFINITIONS)
    get_source_file_property(options ${source} TARGET_DIRECTORY ${target} COMPILE_OPTIONS)
    if(skip OR definitions OR options)
      if(ARG_TORCH AND NOT torch_source)
        set_source_files_properties(${source} TARGET_DIRECTORY ${target} PROPERTIES
                                    SKIP_PRECOMPILE_HEADERS ON)
      endif()
      continue()
    endif()
    set_source_files_properties(${source} TARGET_DIRECTORY ${target} PROPERTIES HEADER_FILE_ONLY ON)
    if(torch_source)
      list(APPEND torch ${path})
    else()
      list(APPEND plain ${path})
    endif()
  endforeach()
  _trellis_unity_batches(${target} torch "${torch}")
  _trellis_unity_batches(${target} plain "${plain}")
endfunction()

function(_trellis_use_torch target visibility)
  target_link_libraries(${target} ${visibility} ${TORCH_LIBRARIES})
  target_include_directories(${target} ${visibility} ${TORCH_INCLUDE_DIRS})
  target_precompile_headers(${target} REUSE_FROM trellis_torch_pch)
  _trellis_unity(${target} TORCH)
  target_compile_options(${target} PRIVATE -pthread)
  # The shared PCH is compiled as library code (-fPIC); GCC ignores it in a
  # target compiled -fPIE (executables), so compile those -fPIC as well.
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    target_compile_options(${target} PRIVATE -fPIC)
  endif()
endfunction()

function(trellis_library name)
  cmake_parse_arguments(ARG "TORCH" "" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(trellis_${name} STATIC ${ARG_SRCS})
  add_library(trellis::${name} ALIAS trellis_${name})
  target_include_directories(trellis_${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(trellis_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  target_compile_options(trellis_${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(ARG_TORCH)
    _trellis_use_torch(trellis_${name} PRIVATE)
  else()
    _trellis_unity(trellis_${name})
  endif()
endfunction()

function(trellis_test name)
  if(NOT TRELLIS_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "TORCH;BINARY;SOURCE_DIR" "" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  if(ARG_BINARY)
    target_compile_definitions(${name} PRIVATE TRELLIS_BINARY="$<TARGET_FILE:trellis>")
    add_dependencies(${name} trellis)
  endif()
  if(ARG_SOURCE_DIR)
    target_compile_definitions(${name} PRIVATE TRELLIS_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  endif()
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock trellis::test_main)
  if(ARG_TORCH)
    _trellis_use_torch(${name} PRIVATE)
  else()
    _trellis_unity(${name})
  endif()
  add_test(NAME ${name} COMMAND ${name})
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
  if("gpu" IN_LIST ARG_LABELS)
    set_tests_properties(${name} PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  PASSED  \\] 0 tests")
  endif()
endfunction()
