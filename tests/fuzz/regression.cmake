# Fuzz regression tests, included from tests/CMakeLists.txt: each fuzz target
# (tests/fuzz/fuzz_<name>.c) is built with the ordinary compiler next to corpus_runner.c and
# replays its committed corpus tests/fuzz/corpus/<name>/ (valid seeds, malformed files and
# past crashers), so no clang or libFuzzer is needed and fixed bugs stay fixed. Under
# LS_SANITIZE the replay runs with ASan + UBSan like every other test.
set(LS_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})

file(GLOB LS_FUZZ_REGRESSION_SOURCES CONFIGURE_DEPENDS ${LS_FUZZ_DIR}/fuzz_*.c)
foreach(src ${LS_FUZZ_REGRESSION_SOURCES})
  get_filename_component(name ${src} NAME_WE)       # fuzz_gguf
  string(REGEX REPLACE "^fuzz_" "" corpus ${name})  # gguf
  if(NOT IS_DIRECTORY ${LS_FUZZ_DIR}/corpus/${corpus})
    continue()
  endif()
  add_executable(${name}_regression ${LS_FUZZ_DIR}/corpus_runner.c ${src})
  target_include_directories(${name}_regression PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(${name}_regression PRIVATE lockstep)
  add_test(NAME ${name}_regression COMMAND ${name}_regression ${LS_FUZZ_DIR}/corpus/${corpus})
  set_tests_properties(${name}_regression PROPERTIES TIMEOUT 300)
endforeach()
