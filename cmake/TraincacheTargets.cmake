# Helper functions: one per kind of target, so every library, tool and test gets the same flags.
#
# Torch is wrapped in one interface target (traincache::torch) that carries the precompiled header;
# every torch target reuses the PCH compiled once for traincache_torch. Targets that do not link it
# have no torch include path, so an accidental #include <torch/...> fails to compile: that is the
# guard that keeps cache-inspect-style code and shm code free of torch.

set(TRAINCACHE_WARNINGS -Wall -Wextra -Wno-unused-parameter)
if(TRAINCACHE_WERROR)
  list(APPEND TRAINCACHE_WARNINGS -Werror)
endif()

add_library(traincache_torch_iface INTERFACE)
target_link_libraries(traincache_torch_iface INTERFACE ${TORCH_LIBRARIES})
target_compile_options(traincache_torch_iface INTERFACE ${TORCH_CXX_FLAGS})
add_library(traincache::torch ALIAS traincache_torch_iface)

# tc_add_library(NAME SOURCES ... [DEPS ...] [TORCH])
function(tc_add_library name)
  cmake_parse_arguments(ARG "TORCH" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${TRAINCACHE_WARNINGS})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/libcore/include
                                            ${PROJECT_BINARY_DIR}/generated)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  if(ARG_TORCH)
    target_link_libraries(${name} PUBLIC traincache::torch)
    target_precompile_headers(${name} PRIVATE ${PROJECT_SOURCE_DIR}/libcore/src/torch_pch.h)
  endif()
endfunction()

# tc_reuse_torch_pch(TARGET): compile TARGET with the PCH built for traincache_torch.
function(tc_reuse_torch_pch target)
  target_precompile_headers(${target} REUSE_FROM traincache_torch)
endfunction()

# tc_add_tool(NAME SOURCES ... DEPS ...): one executable in tools/, installed to bin/.
function(tc_add_tool name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${TRAINCACHE_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
  install(TARGETS ${name} RUNTIME DESTINATION bin)
endfunction()

# tc_add_unit_test(NAME SOURCES ... DEPS ... [TORCH] [LABELS ...])
function(tc_add_unit_test name)
  cmake_parse_arguments(ARG "TORCH" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${TRAINCACHE_WARNINGS})
  target_compile_definitions(${name} PRIVATE CATCH_CONFIG_PREFIX_ALL
                             TRAINCACHE_TEST_DATA_DIR="${PROJECT_BINARY_DIR}/tests/data")
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  if(ARG_TORCH)
    tc_reuse_torch_pch(${name})
  endif()
  add_test(NAME unit.${name} COMMAND ${name})
  set_tests_properties(unit.${name} PROPERTIES LABELS "unit;${ARG_LABELS}" TIMEOUT 300)
endfunction()
