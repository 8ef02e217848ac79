// smart-bench's CI regression gate: compare this run's throughput per strategy with a baseline
// --json document. Pure and torch-free (unit tests in tests/unit/bench/bench_gate_test.cpp).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "traincache/base/report.h"

namespace traincache::bench {

/// One strategy's `measure` over its epochs after the first (over all epochs when it ran one): the
/// median, robust to one epoch that other processes or the page cache slowed or sped up, and the
/// noise, the epochs' median absolute deviation from it relative to it (0 with one epoch).
struct Throughput {
  double median = 0, noise = 0;
  int epochs = 0;
};

/// Throughput per strategy of `measure` (samples_per_second, or samples_per_cpu_second), from
/// records of smart-bench's fields; strategies whose records lack it are left out.
std::map<std::string, Throughput> throughput_of(const report::Json& records,
                                                const std::string& measure = "samples_per_second");

/// The medians of throughput_of().
std::map<std::string, double> throughput(const report::Json& records,
                                         const std::string& measure = "samples_per_second");

/// One strategy's throughput in the baseline and now.
struct Comparison {
  std::string strategy;
  double before = 0, after = 0;              ///< medians
  double noise_before = 0, noise_after = 0;  ///< Throughput::noise
  double change = 0;                         ///< after / before - 1
  bool regressed = false;                    ///< change < -max_regression
};

/// Compares every strategy that both runs measured (with a positive baseline), in name order.
std::vector<Comparison> compare(const report::Json& baseline_records, const report::Json& records,
                                double max_regression, const std::string& measure = "samples_per_second");

/// The records of a smart-bench --json document at `path`. Missing -> Error(no_input); anything
/// else than a document whose records carry strategy, epoch and samples_per_second -> Error(data).
report::Json read_baseline(const std::string& path);

/// The settings of a smart-bench --json document at `path` (its "config"; null when it has none).
report::Json read_baseline_config(const std::string& path);

/// What differs between a baseline's settings and this run's, one "key: was -> now" each, for the
/// keys both record (a baseline from before a key was recorded is not refused for it).
std::vector<std::string> config_differences(const report::Json& was, const report::Json& now);

}  // namespace traincache::bench
