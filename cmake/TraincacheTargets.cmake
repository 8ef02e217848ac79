# Helper functions: one per kind of target, so every library, tool and test gets the same flags.
#
# Dependencies follow dorado's cmake/DoradoTarget.cmake: what a target's public headers expose is
# PUBLIC, everything else PRIVATE. LibTorch is PRIVATE to traincache_torch, and the headers that
# include it (libcore/torch/) are on its PRIVATE include path: the tools, which link
# traincache_torch, have no torch include path, so an accidental #include <torch/...> or
# "traincache/model/encode.h" in a tool or a torch-free header fails to compile. Code that really needs
# torch (the torch unit tests, fill-bench) links traincache::torch_internal instead.
#
# Two precompiled headers: libcore/src/core_pch.h (CLI11, nlohmann-json, HDF5), built once for
# traincache_core and reused by every torch-free translation unit; libcore/src/torch_pch.h, built
# once for traincache_torch and reused by the torch tests and benchmarks.

set(TRAINCACHE_WARNINGS -Wall -Wextra -Wno-unused-parameter)
# GCC 12 warns falsely about std::string's own copies when they are inlined at -O2 under C++20 (GCC
# bugs 105329, 105651: -Warray-bounds, -Wstringop-overflow, -Wrestrict inside basic_string) and
# about a std::optional<std::vector> in LibTorch 2.x's own options (-Wmaybe-uninitialized); pip's
# LibTorch 2.x compiles its users as C++20. Off for GCC 12, so warnings as errors stay usable.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND TRAINCACHE_WARNINGS -Wno-array-bounds -Wno-stringop-overflow -Wno-restrict -Wno-maybe-uninitialized)
endif()
if(TRAINCACHE_WERROR)
  list(APPEND TRAINCACHE_WARNINGS -Werror)
endif()

# tc_static_libstdcxx(OUT): OUT is the path of libstdc++.a when this compiler links the C++ standard
# library statically by default (a test program names no libstdc++.so), else empty.
function(tc_static_libstdcxx out)
  set(dir ${PROJECT_BINARY_DIR}/CMakeFiles/tc_libstdcxx)
  file(WRITE ${dir}/probe.cpp "#include <string>\nint main(int argc, char**) { return std::to_string(argc).size() == 9; }\n")
  try_compile(linked ${dir}/build SOURCES ${dir}/probe.cpp COPY_FILE ${dir}/probe)
  set(archive "")
  if(linked)
    file(STRINGS ${dir}/probe shared REGEX "libstdc\\+\\+\\.so" LIMIT_COUNT 1)
    if(NOT shared)
      execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.a OUTPUT_VARIABLE archive
                      OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(NOT IS_ABSOLUTE "${archive}")
        set(archive "")
      endif()
      message(STATUS "libstdc++ is linked statically: ${archive} goes before LibTorch")
    endif()
  endif()
  set(${out} "${archive}" PARENT_SCOPE)
endfunction()

add_library(traincache_torch_iface INTERFACE)
# The C++ standard library first in every torch-linked binary's NEEDED list, ahead of LibTorch: the
# dynamic linker binds each symbol to the first library of that list that defines it, and pip's
# libtorch.so exports its own copies of some std:: functions (std::filesystem::remove_all there
# crashed cache-fill). A link option comes before the objects and libraries on the command line.
target_link_options(traincache_torch_iface INTERFACE "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
# A g++ that links libstdc++ statically (the GPU machine's does) makes the tools define the std::
# functions they call, except that the linker takes a function from a shared library it has already
# read rather than from libstdc++.a at the end of the line: pip's LibTorch exports std::filesystem, so
# three of its functions came from LibTorch. There libstdc++.a goes just before LibTorch, after our
# own libraries, and every std:: function any of them calls comes from it.
tc_static_libstdcxx(TC_STATIC_LIBSTDCXX)
# A target with the property TRAINCACHE_TORCH_CPU_ONLY (the engines module) links LibTorch's CPU
# library alone: a CUDA LibTorch's TORCH_LIBRARIES name libtorch_cuda and libc10_cuda with
# --no-as-needed, and loading those (with cuDNN, cuBLAS, NCCL...) was 40% of LibTorch's load in a run
# on the CPU. What runs on CUDA devices is in libtraincache_cuda.so (libcore/src/model/cuda_module.h).
if(TORCH_CUDA_LIBRARIES AND TARGET torch_cpu_library)
  set(tc_cpu_only "$<BOOL:$<TARGET_PROPERTY:TRAINCACHE_TORCH_CPU_ONLY>>")
  target_link_libraries(traincache_torch_iface INTERFACE ${TC_STATIC_LIBSTDCXX} "$<${tc_cpu_only}:torch_cpu_library>"
                                                         "$<$<NOT:${tc_cpu_only}>:${TORCH_LIBRARIES}>")
  # and what the torch target asks of its users' compilation (C++20, the C++ API's include folder)
  target_include_directories(traincache_torch_iface SYSTEM INTERFACE "$<${tc_cpu_only}:${TORCH_INCLUDE_DIRS}>")
  foreach(prop COMPILE_FEATURES COMPILE_OPTIONS)
    get_target_property(tc_torch_${prop} torch INTERFACE_${prop})
    if(tc_torch_${prop})
      set_property(TARGET traincache_torch_iface APPEND PROPERTY INTERFACE_${prop} "$<${tc_cpu_only}:${tc_torch_${prop}}>")
    endif()
  endforeach()
else()
  target_link_libraries(traincache_torch_iface INTERFACE ${TC_STATIC_LIBSTDCXX} ${TORCH_LIBRARIES})
endif()
# pip's CUDA LibTorch finds NCCL, cuDNN and the CUDA libraries beside it (site-packages/nvidia/*/lib,
# its RPATH at run time). The linker must find the same ones: a machine with the CUDA toolkit has an
# older NCCL in ld.so.conf's folders, which lacks symbols libtorch_cuda.so needs.
file(GLOB TC_PIP_NVIDIA_LIBS LIST_DIRECTORIES true "${Torch_DIR}/../../../../nvidia/*/lib")
foreach(dir ${TC_PIP_NVIDIA_LIBS})
  target_link_options(traincache_torch_iface INTERFACE "LINKER:-rpath-link,${dir}")
endforeach()
add_library(traincache::torch ALIAS traincache_torch_iface)

# tc_add_library(NAME SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...] [TORCH] [OBJECT] [PCH header])
# TORCH: LibTorch and libcore/torch/ are PRIVATE; OBJECT: an object library (else static); PCH:
# compile with this precompiled header.
function(tc_add_library name)
  cmake_parse_arguments(ARG "TORCH;OBJECT" "PCH" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(kind STATIC)
  if(ARG_OBJECT)
    set(kind OBJECT)
  endif()
  add_library(${name} ${kind} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${TRAINCACHE_WARNINGS})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/libcore/include
                                            ${PROJECT_BINARY_DIR}/generated)
  target_link_libraries(${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  if(ARG_TORCH)
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/libcore/torch)
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
  target_precompile_headers(${target} REUSE_FROM traincache_core_objects)
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
  set_target_properties(${name} PROPERTIES INSTALL_RPATH "$ORIGIN/../lib")
  install(TARGETS ${name} RUNTIME DESTINATION bin)
endfunction()

# tc_add_unit_test(NAME SOURCES ... DEPS ... [TORCH] [LABELS ...])
# What tests/unit/catch_main.cpp prints last when every selected case ran and passed: a unit test
# passes on that line, not on its exit status alone (a case that ends the process early exits 0).
set(TC_UNIT_PASSED "unit tests: every selected case ran and passed")
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
  # Cases tagged [gpu] need a CUDA device (and nvJPEG): unit.NAME_gpu runs them, and reports itself
  # skipped where `cache-fill --version` says the machine or the build lacks one (CI's machines).
  add_test(NAME unit.${name} COMMAND ${name} "~[gpu]")
  set_tests_properties(unit.${name} PROPERTIES LABELS "unit;${ARG_LABELS}" TIMEOUT 300 ENVIRONMENT "${TC_TEST_ENV}"
                       PASS_REGULAR_EXPRESSION "${TC_UNIT_PASSED}")
  if(ARG_TORCH)
    add_test(NAME unit.${name}_gpu COMMAND bash -c
      "v=$(\"$0\" --version) || exit 1; if ! grep -qx 'CUDA: available' <<<\"$v\" || ! grep -q '^nvJPEG: built' <<<\"$v\"; then echo 'skipped: the [gpu] cases need a CUDA device and nvJPEG'; exit 77; fi; exec \"$1\" '[gpu]'"
      $<TARGET_FILE:cache-fill> $<TARGET_FILE:${name}>)
    set_tests_properties(unit.${name}_gpu PROPERTIES LABELS "unit;gpu;${ARG_LABELS}" TIMEOUT 300
                         ENVIRONMENT "${TC_TEST_ENV}" SKIP_RETURN_CODE 77)
  endif()
endfunction()
