# penstock_library(NAME SOURCES ... DEPS ...): one static library per module, project-root includes,
# warnings as errors in our own code.
set(PENSTOCK_WARNINGS -Wall -Wextra -Werror -Wno-unused-parameter)

function(penstock_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${PENSTOCK_WARNINGS}>)
endfunction()

# penstock_test(NAME SOURCES ... DEPS ... LABELS ...): a gtest binary registered with ctest.
function(penstock_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS;ARGS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${PENSTOCK_WARNINGS}>)
  target_compile_definitions(${name} PRIVATE PENSTOCK_FIXTURES_DIR="${PENSTOCK_FIXTURES_DIR}"
                                             PENSTOCK_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data")
  add_test(NAME ${name} COMMAND ${name} ${ARG_ARGS})
  if(NOT ARG_LABELS)
    set(ARG_LABELS cpu)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT})
endfunction()
