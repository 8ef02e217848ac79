// What --version reports about the compute runtime of the torch tools. Implemented in the torch
// library; the header itself is torch-free, so a tool's main() needs no torch header for it.
#pragma once

#include <string>

namespace traincache::model {

/// "LibTorch 1.13.1\nBLAS: ...\nCUDA: not available\ncores: N (...)": lines for --version.
std::string runtime_info();

/// runtime_info() from libtraincache_engines.so (base/module.h), loaded on the first call, for
/// the tools that link no LibTorch. A module that cannot be loaded -> Error(unavailable).
std::string runtime_info_in_module();

/// Whether this build has nvJPEG, to decode JPEG files on CUDA devices (found when it was
/// configured: libcore/CMakeLists.txt). Torch-free.
bool nvjpeg_built();

/// Error(unavailable, "nvJPEG", ...) unless nvjpeg_built().
void require_nvjpeg();

}  // namespace traincache::model
