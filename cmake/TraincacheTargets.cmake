# Helper functions: one per kind of target, so every library, tool and test gets the same flags.
#
# Dependencies follow dorado's cmake/DoradoTarget.cmake: what a target's public headers expose is
# PUBLIC, everything else PRIVATE. LibTorch is PRIVATE to traincache_torch, and the headers that
# include it (libcore/internal/) are on its PRIVATE include path: the tools, which link
# traincache_torch, have no torch include path, so an accidental #include <torch/...> or
# "traincache/model/encode.h" in a tool or a torch-free header fails to compile. Code that really needs
# torch (the torch unit tests, fill-bench) links traincache::torch_internal instead.
#
# Two precompiled headers: libcore/src/core_pch.h (CLI11, nlohmann-json, HDF5), built once for
# traincache_core and reused by every torch-free translation unit; libcore/src/torch_pch.h, built
# once for traincache_torch and reused by the torch tests and benchmarks.

set(TRAINCACHE_WARNINGS -Wall -Wextra -Wno-unused-parameter)
if(TRAINCACHE_WERROR)
  list(APPEND TRAINCACHE_WARNINGS -Werror)
endif()

add_library(traincache_torch_iface INTERFACE)
# The C++ standard library first in every torch-linked binary's NEEDED list, ahead of LibTorch: the
# dynamic linker binds each symbol to the first library of that list that defines it, and pip's
# libtorch.so exports its own copies of some std:: functions (std::filesystem::remove_all there
# crashed cache-fill). A link option comes before the objects and libraries on the command line.
# (A g++ that links libstdc++ statically, as the GPU machine's does, needs none of this: the tools
# then define the std:: functions they call; tests/lint/check-needed-order accepts that.)
target_link_options(traincache_torch_iface INTERFACE "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
target_link_libraries(traincache_torch_iface INTERFACE ${TORCH_LIBRARIES})
add_library(traincache::torch ALIAS traincache_torch_iface)

# tc_add_library(NAME SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...] [TORCH] [PCH header])
# TORCH: LibTorch and libcore/internal/ are PRIVATE; PCH: compile with this precompiled header.
function(tc_add_library name)
  cmake_parse_arguments(ARG "TORCH" "PCH" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${TRAINCACHE_WARNINGS})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/libcore/include
                                            ${PROJECT_BINARY_DIR}/generated)
  target_link_libraries(${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  if(ARG_TORCH)
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/libcore/internal)
    target_link_libraries(${name} PRIVATE traincache::torch)
  endif()
  if(ARG_PCH)
    target_precompile_headers(${name} PRIVATE ${ARG_PCH})
  endif()
endfunction()

# tc_reuse_torch_pch(TARGET) / tc_reuse_core_pch(TARGET): compile TARGET with the PCH built for
# traincache_torch / traincache_core (the flags are the same for every target).
function(tc_reuse_torch_pch target)
  target_precompile_headers(${target} REUSE_FROM traincache_torch)
endfunction()
function(tc_reuse_core_pch target)
  target_precompile_headers(${target} REUSE_FROM traincache_core)
endfunction()

# tc_add_tool(NAME SOURCES ... DEPS ... [TORCH]): one executable in tools/ (or bench/), installed
# to bin/. TORCH: the code itself uses LibTorch (reuses the torch PCH instead of the core one).
function(tc_add_tool name)
  cmake_parse_arguments(ARG "TORCH" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${TRAINCACHE_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
  if(ARG_TORCH OR "traincache_torch" IN_LIST ARG_DEPS OR "traincache::torch_internal" IN_LIST ARG_DEPS)
    # OpenMP threads wait passively unless OMP_WAIT_POLICY says otherwise (set before libgomp starts).
    target_sources(${name} PRIVATE ${PROJECT_SOURCE_DIR}/libcore/src/cli/openmp_wait.cpp)
  endif()
  if(ARG_TORCH)
    tc_reuse_torch_pch(${name})
  else()
    tc_reuse_core_pch(${name})
  endif()
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
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/unit)  # catch.h, test_util.h
  if(ARG_TORCH)
    tc_reuse_torch_pch(${name})
  else()
    tc_reuse_core_pch(${name})
  endif()
  add_test(NAME unit.${name} COMMAND ${name})
  set_tests_properties(unit.${name} PROPERTIES LABELS "unit;${ARG_LABELS}" TIMEOUT 300 ENVIRONMENT "${TC_TEST_ENV}")
endfunction()
