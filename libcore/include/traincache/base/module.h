// Modules of our own that a tool loads with dlopen() when it first needs them: libtraincache_spm.so
// (SentencePiece, whose protobuf must not meet LibTorch's) and libtraincache_verify.so
// (cache-inspect's LibTorch part, so that cache-inspect starts without LibTorch).
#pragma once

#include <string>

namespace traincache {

/// dlopen()s the module FILE (e.g. "libtraincache_spm.so") with FLAGS: the path in the environment
/// variable ENV when it is set, else the first of the lib/ folder beside the running executable's
/// folder (bin/ and lib/ of a build or an installed tree) and the build tree's lib/. Throws
/// Error(unavailable, what, "cannot load FILE: <dlerror's words>").
void* open_module(const std::string& file, const char* env, int flags, const std::string& what);

/// dlsym(handle, name), or Error(unavailable, what, "FILE lacks NAME") when the module lacks it.
void* module_symbol(void* handle, const char* name, const std::string& file, const std::string& what);

}  // namespace traincache
