#include "traincache/bench/bench_gate.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>

#include "traincache/base/error.h"
#include "traincache/base/files.h"

namespace traincache::bench {

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::map<std::string, Throughput> throughput_of(const report::Json& records, const std::string& measure) {
  std::map<std::string, std::vector<double>> later, first;
  for (const auto& r : records) {
    if (!r.contains(measure) || !r.at(measure).is_number()) continue;
    auto& a = r.at("epoch").get<int64_t>() > 1 ? later[r.at("strategy")] : first[r.at("strategy")];
    a.push_back(r.at(measure).get<double>());
  }
  for (auto& [s, rates] : later) first[s] = rates;
  std::map<std::string, Throughput> out;
  for (const auto& [s, rates] : first) {
    Throughput t;
    t.median = median_of(rates);
    t.epochs = static_cast<int>(rates.size());
    std::vector<double> deviation;
    for (double r : rates) deviation.push_back(std::fabs(r - t.median));
    t.noise = t.median > 0 ? median_of(deviation) / t.median : 0;
    out[s] = t;
  }
  return out;
}

std::map<std::string, double> throughput(const report::Json& records, const std::string& measure) {
  std::map<std::string, double> out;
  for (const auto& [s, t] : throughput_of(records, measure)) out[s] = t.median;
  return out;
}

std::vector<Comparison> compare(const report::Json& baseline_records, const report::Json& records,
                                double max_regression, const std::string& measure) {
  const auto before = throughput_of(baseline_records, measure);
  std::vector<Comparison> out;
  for (const auto& [s, now] : throughput_of(records, measure)) {
    auto it = before.find(s);
    if (it == before.end() || it->second.median <= 0) continue;
    Comparison c{s,    it->second.median, now.median, it->second.noise, now.noise, now.median / it->second.median - 1,
                 false};
    c.regressed = c.change < -max_regression;
    out.push_back(c);
  }
  return out;
}

report::Json read_baseline_config(const std::string& path) {
  auto doc = report::Json::parse(files::read_input(path), nullptr, false);
  if (doc.is_object() && doc.contains("config") && doc["config"].is_object()) return doc["config"];
  return nullptr;
}

std::vector<std::string> config_differences(const report::Json& was, const report::Json& now) {
  std::vector<std::string> out;
  if (!was.is_object()) return out;
  for (const auto& [key, value] : now.items()) {
    const auto it = was.find(key);
    if (it == was.end() || *it == value) continue;
    if (it->is_object() && value.is_object()) {
      for (const auto& d : config_differences(*it, value)) out.push_back(key + "/" + d);
      continue;
    }
    out.push_back(key + ": " + it->dump() + " -> " + value.dump());
  }
  return out;
}

report::Json read_baseline(const std::string& path) {
  auto doc = report::Json::parse(files::read_input(path), nullptr, false);  // a FIFO is refused, not waited on
  auto well_formed = [](const report::Json& r) {
    return r.is_object() && r.contains("strategy") && r["strategy"].is_string() && r.contains("epoch") &&
           r["epoch"].is_number_integer() && r.contains("samples_per_second") && r["samples_per_second"].is_number();
  };
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("records") || !doc["records"].is_array())
    throw Error(Exit::data, path, "not a smart-bench --json document");
  for (const auto& r : doc["records"])
    if (!well_formed(r))
      throw Error(Exit::data, path,
                  "not a smart-bench --json document (a record lacks strategy, epoch or samples_per_second)");
  return doc["records"];
}

}  // namespace traincache::bench
