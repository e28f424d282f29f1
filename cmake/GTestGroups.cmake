# lfm_gtest_groups(TARGET [TIMEOUT seconds]): registers a GoogleTest binary with ctest as one test
# per group instead of one per test (gtest_discover_tests): a plain suite's tests form one group,
# a parameterised test's instances another. For builds whose every process start is expensive
# (the sanitizers' runtime and data). Groups are listed when ctest starts, from the binary itself;
# a failing group's output names the failing tests.
set(LFM_GTEST_GROUPS_LISTER ${CMAKE_CURRENT_LIST_DIR}/gtest_groups_list.cmake)

function(lfm_gtest_groups target)
  cmake_parse_arguments(ARG "" "TIMEOUT" "" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 1500)
  endif()
  set(include_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_groups.cmake)
  file(GENERATE OUTPUT ${include_file} CONTENT
       "set(LFM_GROUPS_EXE [==[$<TARGET_FILE:${target}>]==])\nset(LFM_GROUPS_DIR [==[${CMAKE_CURRENT_BINARY_DIR}]==])\nset(LFM_GROUPS_TIMEOUT ${ARG_TIMEOUT})\ninclude([==[${LFM_GTEST_GROUPS_LISTER}]==])\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()
