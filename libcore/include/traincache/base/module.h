// Modules of our own that a tool loads with dlopen() when it first needs them: libtraincache_spm.so
// (SentencePiece, whose protobuf must not meet LibTorch's) and libtraincache_engines.so (the
// LibTorch part of cache-fill, gc-train and cache-inspect, so that those tools start, parse their
// options and refuse bad ones without loading LibTorch).
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include "traincache/base/error.h"

namespace traincache {

/// dlopen()s the module FILE (e.g. "libtraincache_spm.so") with FLAGS: the path in the environment
/// variable ENV when it is set, else the first of the lib/ folder beside the running executable's
/// folder (bin/ and lib/ of a build or an installed tree) and the build tree's lib/. The libraries
/// listed in FILE.load-order beside it, where there is one, are loaded first, one at a time. Throws
/// Error(unavailable, what, "cannot load FILE: <dlerror's words>").
void* open_module(const std::string& file, const char* env, int flags, const std::string& what);

/// dlsym(handle, name), or Error(unavailable, what, "FILE lacks NAME") when the module lacks it.
void* module_symbol(void* handle, const char* name, const std::string& file, const std::string& what);

/// The function NAME of libtraincache_engines.so (TRAINCACHE_ENGINES_MODULE names another file),
/// which is loaded, and LibTorch with it, on the first call. Error(unavailable, "LibTorch", ...)
/// when it cannot be loaded or lacks NAME.
void* engines_symbol(const char* name);

/// libtraincache_cuda.so (TRAINCACHE_CUDA_MODULE names another file), and CUDA's LibTorch libraries
/// with it: what the engines module runs only on CUDA devices (model/cuda_module.h), so that a run
/// on the CPU loads LibTorch's CPU libraries alone. LibTorch asks whether it has CUDA once, at the
/// first question, and keeps the answer: a tool whose options name a CUDA device calls this before
/// the engines module loads. Does nothing in a build without the module (a CPU LibTorch); throws
/// Error(unavailable, "CUDA", "cannot load ...") when it cannot be loaded.
void load_cuda_module();

/// Why load_cuda_module last failed (dlopen's words), or "" when it has not: --version's CUDA line
/// says it.
std::string cuda_module_failure();

/// The function NAME of libtraincache_cuda.so, loaded on the first call. Error(unavailable, "CUDA",
/// ...) in a build without it, or when it cannot be loaded or lacks NAME.
void* cuda_symbol(const char* name);

/// libtraincache_engines.so loaded on a thread of its own from construction on, beside the caller's
/// work (cache-fill plans its run meanwhile: the module's load is one core's work for a third of a
/// second). engines_symbol, on any thread, waits for it; so does the destructor. A load that failed
/// is thrown by wait() (and again by the next engines_symbol), never by the constructor.
class EnginesLoad {
 public:
  EnginesLoad();
  ~EnginesLoad();
  EnginesLoad(const EnginesLoad&) = delete;
  EnginesLoad& operator=(const EnginesLoad&) = delete;

  /// Waits for the load; throws what it failed with.
  void wait();

  /// Whether the load has ended (loaded or failed): wait() then returns at once.
  bool done() const { return done_.load(std::memory_order_acquire); }

 private:
  void join();

  bool set_wait_;  // libgomp's waiting settings were set here for the load, and are unset after it
  std::exception_ptr failure_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

/// glibc's malloc in a process that runs LibTorch: unless the environment chose (GLIBC_TUNABLES
/// naming a glibc.malloc setting, or a MALLOC_*_ variable), freed blocks of up to 32 MiB (glibc's
/// largest threshold) stay in the heap and up to 256 MiB may stay free at its top, so that the
/// next batch reuses the pages the last one freed instead of faulting them in anew, zeroed
/// (docs/design.md, "Memory between batches"). Returns whether it set them. engines_symbol calls
/// it as a tool loads LibTorch; never called in a library user's process.
bool keep_freed_memory();

/// Faults in up to `bytes` of fresh heap (at most 192 MiB, in blocks below malloc's mmap threshold)
/// and frees it again, where keep_freed_memory() keeps it at the heap's top: what the caller
/// allocates next (a model's tensors, read as LibTorch loads it) takes pages already there instead
/// of faulting each one in on the way. Stops early once `stop` returns true (checked between
/// blocks): meant for a wait on another thread's work, on a machine with a core to spare.
void warm_heap(std::size_t bytes, const std::function<bool()>& stop);

/// How a module's function failed: exceptions do not cross a module's C interface, so each
/// function reports its failure here. kind 0: none; 1: traincache::Error (code, message); 2: out
/// of memory; 3: any other exception (message).
struct ModuleFailure {
  int kind = 0;
  int code = 0;
  std::string message;
};

/// Runs BODY in a module's function, catching whatever it throws into *FAILURE.
template <class F>
void guarded(ModuleFailure* failure, F&& body) noexcept {
  try {
    body();
  } catch (const Error& e) {
    *failure = {1, static_cast<int>(e.code()), e.what()};
  } catch (const std::bad_alloc&) {
    *failure = {2, 0, {}};
  } catch (const std::exception& e) {
    *failure = {3, 0, e.what()};
  } catch (...) {
    *failure = {3, 0, "unknown exception"};
  }
}

/// On the caller's side: throws the exception FAILURE describes (nothing when kind is 0).
void rethrow(const ModuleFailure& failure);

/// Calls the engines module's function NAME, declared as FN (its last parameter a ModuleFailure*),
/// with ARGS, and throws what it failed with: each entry point's caller is this one line.
template <class Fn, class... Args>
void call_engines(const char* name, Args... args) {
  ModuleFailure failure;
  reinterpret_cast<Fn*>(engines_symbol(name))(args..., &failure);
  rethrow(failure);
}

/// call_engines' twin for libtraincache_cuda.so's functions.
template <class Fn, class... Args>
void call_cuda(const char* name, Args... args) {
  ModuleFailure failure;
  reinterpret_cast<Fn*>(cuda_symbol(name))(args..., &failure);
  rethrow(failure);
}

}  // namespace traincache
