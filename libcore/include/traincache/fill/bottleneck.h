// cache-fill's bottleneck report: from the busy time of each stage of a fill, which one bounds the
// run and how far the run is from the encoder's own speed. Torch-free and pure, so unit tests
// cover every verdict with chosen timings (docs/performance.md, "Reading the bottleneck line").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace traincache::fill {

/// Busy seconds of each stage of a fill's encode loop, summed over the threads that run it.
struct StageSeconds {
  double input = 0;     ///< reader threads: whole units (read, decode, resize, tokenize and copies)
  double decode = 0;    ///< part of input: image files decoded
  double resize = 0;    ///< part of input: resize, crop and normalisation
  double tokenize = 0;  ///< part of input: text fields read and tokenized
  double convert = 0;   ///< encode thread: inputs to the encoders' device and type
  double forward = 0;   ///< encode thread: encoder forward calls, to the device's completion
  double to_host = 0;   ///< encode thread: outputs copied back to host memory as stored
  double store = 0;     ///< store thread: outputs checked, appended to the journal, committed
};

/// What a finished fill measured.
struct FillTimings {
  StageSeconds busy;
  int readers = 1;              ///< reader threads (--workers)
  bool convert_thread = false;  ///< conversion ran on a thread of its own, beside the encode thread
  int64_t rows = 0;             ///< rows encoded
  double seconds = 0;           ///< the whole run
  double loop_seconds = 0;      ///< the encode loop, less the first batch's checks
  double model_setup_seconds = 0, digest_seconds = 0, publish_seconds = 0;
  int64_t tokens = 0, token_slots = 0;  ///< text: tokens encoded, and their batches' slots (padding included)
  std::string padding_remedy;           ///< what lowers the padding share, for the verdict when it is large
  std::string int8_instructions;        ///< --precision int8: the CPU's (int8_instructions()); else ""
};

/// Which stage bounds a fill, and by how much.
struct Bottleneck {
  struct Stage {
    std::string name;  ///< read, decode, resize, tokenize, convert, forward, to_host, store
    int threads = 1;
    double busy_seconds = 0;
    double busy_share = 0;       ///< of the loop's time on the stage's threads
    double rows_per_second = 0;  ///< the stage's rate were it alone (0: it took no measurable time)
  };
  std::vector<Stage> stages;
  std::string bound;  ///< a stage's name, or "fixed costs" (when they took longer than the loop)
  /// The stage group that bounds the loop, its rate and threads: "readers", "convert" (when it ran on
  /// a thread of its own), "encode" or "store".
  std::string group;
  double group_rows_per_second = 0;
  int group_threads = 1;
  bool convert_thread = false;         ///< FillTimings::convert_thread: conversion was a group of its own
  double rows_per_second = 0;          ///< the run's: rows encoded over the whole run's seconds
  double forward_rows_per_second = 0;  ///< the encoders' forward calls alone
  double model_fraction = 0;           ///< rows_per_second over forward_rows_per_second
  double loop_seconds = 0, fixed_seconds = 0;
  double padding_share = -1;      ///< of the text's token slots, the padding's (-1: no text)
  std::string int8_instructions;  ///< FillTimings::int8_instructions ("": not int8)
  std::string verdict;            ///< the closing line: "bound by decode: 16 readers 7,150 rows/s; ..."
};

/// Above this padding share the verdict names FillTimings::padding_remedy.
inline constexpr double kLargePaddingShare = 0.25;

/// The report; nothing when the fill encoded no rows or its forward calls took no time.
std::optional<Bottleneck> find_bottleneck(const FillTimings& t);

}  // namespace traincache::fill
