# Helpers shared by the module CMakeLists files.

# frugal_test(NAME SOURCES... LIBS ...): a GoogleTest executable registered with ctest.
function(frugal_test name)
  if(NOT FRUGAL_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}")
endfunction()

# frugal_torch_target(TARGET): marks a target as LibTorch-using and gives it the
# shared precompiled header, so torch/torch.h is parsed once per build.
function(frugal_torch_target target)
  target_link_libraries(${target} PUBLIC ${TORCH_LIBRARIES})
  target_include_directories(${target} SYSTEM PUBLIC ${TORCH_INCLUDE_DIRS})
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE" AND TARGET frugal_torch_pch_exe)
    target_precompile_headers(${target} REUSE_FROM frugal_torch_pch_exe)
  elseif(TARGET frugal_torch_pch)
    target_precompile_headers(${target} REUSE_FROM frugal_torch_pch)
  endif()
endfunction()
