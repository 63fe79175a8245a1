# Server-side fuzz target and unit tests. tests/fuzz/regression.cmake already turns
# tests/fuzz/fuzz_request.c + corpus/request/ into the fuzz_request_regression test (and
# tests/fuzz/CMakeLists.txt into the libFuzzer target fuzz_request under LS_FUZZ), and
# tests/CMakeLists.txt turns tests/test_server_*.c into cmocka tests; those generic rules link
# only `lockstep`, so this adds the server library (src/server: request parsing, stop
# sequences; cJSON). Included from the top-level CMakeLists.txt after the test directories,
# so it covers both builds (linking a target of another directory needs CMP0079, CMake 3.13+).
set(LS_SERVER_TEST_TARGETS fuzz_request_regression fuzz_request)
file(GLOB LS_SERVER_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_server_*.c)
foreach(src ${LS_SERVER_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  list(APPEND LS_SERVER_TEST_TARGETS ${name})
endforeach()
list(APPEND LS_SERVER_TEST_TARGETS test_tool_calls) # tool calls (src/server/tools.c)
foreach(t ${LS_SERVER_TEST_TARGETS})
  if(TARGET ${t})
    target_link_libraries(${t} PRIVATE lockstep_server)
  endif()
endforeach()
# In the libFuzzer build (LS_FUZZ, tests/fuzz/CMakeLists.txt) the parser must carry coverage
# instrumentation and the sanitizers, like the core library does there.
if(LS_FUZZ AND TARGET lockstep_server)
  target_compile_options(lockstep_server PRIVATE -fsanitize=fuzzer-no-link -fsanitize=address,undefined
                         -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
endif()
# The HTTP fuzz target (tests/fuzz/fuzz_http.c) drives the server's HTTP front end itself
# (tools/server/http.c + http_watch.c + slots.c + logprobs.c + tool_calls.c on libmicrohttpd) through
# socketpairs: it compiles those sources in and links libmicrohttpd, in the regression build and in the
# libFuzzer build.
foreach(t fuzz_http_regression fuzz_http)
  if(TARGET ${t})
    target_sources(${t} PRIVATE ${CMAKE_SOURCE_DIR}/tools/server/http.c ${CMAKE_SOURCE_DIR}/tools/server/http_watch.c
                                ${CMAKE_SOURCE_DIR}/tools/server/slots.c ${CMAKE_SOURCE_DIR}/tools/server/logprobs.c
                                ${CMAKE_SOURCE_DIR}/tools/server/tool_calls.c)
    target_include_directories(${t} PRIVATE ${CMAKE_SOURCE_DIR}/tools/server)
    target_link_libraries(${t} PRIVATE lockstep_server PkgConfig::MHD)
  endif()
endforeach()
