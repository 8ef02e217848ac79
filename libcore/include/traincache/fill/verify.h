// cache-inspect --verify: re-encode sampled rows with the recorded encoder and compare them with
// the cache, to catch stale caches. Torch-free interface; implemented in the torch part of libcore.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace traincache::fill {

/// What to verify and how strictly.
struct VerifyOptions {
  std::string cache;
  int64_t samples = 16;                         ///< rows to re-encode per encoder
  uint64_t seed = 0;                            ///< seeds the row sample
  std::map<std::string, std::string> encoders;  ///< name -> path overriding the recorded one
  std::string input;                            ///< overrides the recorded input path
  double rtol = -1;                             ///< < 0: 1e-4 for float32 caches, 2e-3 for float16
  double atol = 1e-5;
  std::string device = "cpu";
  int threads = 0;
};

/// The verdict for one encoder.
struct EncoderVerdict {
  std::string name;
  std::string encoder_path;
  bool encoder_changed = false;  ///< the file's SHA-256 differs from the recorded one
  int64_t checked = 0;
  int64_t mismatched = 0;  ///< rows with an element outside atol + rtol * |cached|
  double max_abs_diff = 0;
  double rtol = 0, atol = 0;
  int64_t first_bad_row = -1;
  bool ok() const { return !encoder_changed && mismatched == 0; }
};

/// All verdicts for one file.
struct VerifyReport {
  std::string path;
  std::vector<int64_t> rows;  ///< the sampled cache rows
  std::vector<EncoderVerdict> encoders;
  bool ok() const;
};

/// Runs the verification. Unreadable cache, input or encoder -> traincache::Error.
VerifyReport run_verify(const VerifyOptions& opts);

/// run_verify in libtraincache_engines.so (base/module.h), loaded on first use, so that a program
/// that calls it links no LibTorch and loads it only when it verifies (cache-inspect). The same
/// results and errors; a module that cannot be loaded -> Error(unavailable).
VerifyReport run_verify_in_module(const VerifyOptions& opts);

}  // namespace traincache::fill
