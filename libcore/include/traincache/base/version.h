// Version, build and runtime information printed by every tool's --version.
#pragma once

#include <string>

namespace traincache {

/// The traincache release, e.g. "0.1.0".
const char* version();

/// The git revision the build was configured from ("unknown" outside a checkout).
const char* git_revision();

/// The BLAS library the process resolved for libblas.so.3 (its real path), or "none loaded".
/// LibTorch's matrix products go through it; the reference BLAS is ~30x slower than OpenBLAS.
std::string active_blas();

/// "tool 0.1.0 (git abc123)" followed by extra lines given by the caller.
std::string version_banner(const std::string& tool);

}  // namespace traincache
