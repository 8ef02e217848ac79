// cache-inspect: summarise, check and verify traincache cache files. See docs/cache-inspect.md.
#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "traincache/cache_file.h"
#include "traincache/cli.h"
#include "traincache/runtime.h"
#include "traincache/text.h"
#include "traincache/verify.h"

using namespace traincache;
using json = nlohmann::ordered_json;

namespace {

constexpr const char* kTool = "cache-inspect";

struct Options {
  cli::CommonOptions common;
  std::vector<std::string> files;
  bool stats = false, check = false;
  int64_t verify = 0, head = 0;
  uint64_t seed = 0;
  std::vector<std::string> encoders;
  std::string input;
  double rtol = -1, atol = 1e-5;
};



json info_json(const cache::CacheInfo& c) {
  json j{{"path", c.path},
         {"format", cache::kFormatName},
         {"format_version", c.format_version},
         {"complete", c.complete},
         {"rows", c.rows},
         {"row_start", c.row_start},
         {"created_by", c.created_by},
         {"input_path", c.input_path},
         {"features", c.features},
         {"input_scale", c.input_scale},
         {"fingerprint", c.fingerprint}};
  j["embeddings"] = json::array();
  for (const auto& e : c.embeddings)
    j["embeddings"].push_back({{"name", e.name},
                               {"shape", e.shape},
                               {"dtype", dtype_name(e.dtype)},
                               {"bytes", e.bytes},
                               {"encoder_path", e.encoder_path},
                               {"encoder_sha256", e.encoder_sha256},
                               {"features", e.features},
                               {"output", e.output},
                               {"inference", e.inference}});
  if (c.labels) {
    json counts = json::object();
    for (auto [k, n] : c.labels->counts) counts[std::to_string(k)] = n;
    j["labels"] = {{"source", c.labels->source},
                   {"dtype", dtype_name(c.labels->dtype)},
                   {"rows", c.labels->rows},
                   {"classes", c.labels->counts.size()},
                   {"counts", counts}};
  } else {
    j["labels"] = nullptr;
  }
  j["keys"] = c.keys_dtype ? json{{"source", *c.keys_source}, {"dtype", dtype_name(*c.keys_dtype)}}
                           : json(nullptr);
  return j;
}

void print_info(const cache::CacheInfo& c) {
  std::printf("%s\n", c.path.c_str());
  std::printf("  format       %s v%" PRId64 ", %s\n", cache::kFormatName, c.format_version,
              c.complete ? "complete" : "INCOMPLETE");
  std::printf("  rows         %" PRId64 " (input rows %" PRId64 "..%" PRId64 ")\n", c.rows, c.row_start,
              c.row_start + c.rows);
  std::printf("  created by   %s\n", c.created_by.c_str());
  std::string feats;
  for (const auto& f : c.features) feats += (feats.empty() ? "" : ",") + f;
  std::printf("  input        %s [%s], uint8 scale %g\n", c.input_path.c_str(), feats.c_str(), c.input_scale);
  std::printf("  fingerprint  %s\n", c.fingerprint.c_str());
  for (const auto& e : c.embeddings) {
    std::printf("  embeddings/%s  %s %s %s, %s, from %s (sha256 %.12s)\n", e.name.c_str(),
                shape_text(e.shape).c_str(), dtype_name(e.dtype), format_size(e.bytes).c_str(),
                e.inference.c_str(), e.encoder_path.c_str(), e.encoder_sha256.c_str());
  }
  if (c.labels) {
    std::printf("  labels       %s from '%s'", dtype_name(c.labels->dtype), c.labels->source.c_str());
    if (!c.labels->counts.empty()) {
      std::printf(", %zu classes:", c.labels->counts.size());
      for (auto [k, n] : c.labels->counts) std::printf(" %" PRId64 ":%" PRId64, k, n);
    }
    std::printf("\n");
  } else {
    std::printf("  labels       none\n");
  }
  if (c.keys_dtype) std::printf("  keys         %s from '%s'\n", dtype_name(*c.keys_dtype), c.keys_source->c_str());
  else std::printf("  keys         none (key = input row number)\n");
}

json stats_json(const std::vector<cache::EmbeddingStats>& stats) {
  json a = json::array();
  for (const auto& s : stats)
    a.push_back({{"name", s.name}, {"rows", s.rows}, {"norm_mean", s.norm_mean}, {"norm_std", s.norm_std},
                 {"norm_min", s.norm_min}, {"norm_max", s.norm_max}, {"nan_count", s.nan_count},
                 {"inf_count", s.inf_count}});
  return a;
}

void print_stats(const std::vector<cache::EmbeddingStats>& stats) {
  for (const auto& s : stats)
    std::printf("  stats/%s  norm mean %.6g std %.6g min %.6g max %.6g; NaN %" PRId64 ", Inf %" PRId64 "\n",
                s.name.c_str(), s.norm_mean, s.norm_std, s.norm_min, s.norm_max, s.nan_count, s.inf_count);
}

json head_json(const std::vector<cache::CacheRow>& rows) {
  json a = json::array();
  for (const auto& r : rows) {
    json j{{"row", r.index}, {"key", r.key}, {"label", r.label ? json(*r.label) : json(nullptr)}};
    for (const auto& [name, v] : r.embeddings) j["embeddings"][name] = v;
    a.push_back(j);
  }
  return a;
}

void print_head(const std::vector<cache::CacheRow>& rows) {
  if (rows.empty()) return;
  std::printf("row\tkey\tlabel");
  for (const auto& [name, v] : rows[0].embeddings) std::printf("\t%s", name.c_str());
  std::printf("\n");
  for (const auto& r : rows) {
    std::printf("%" PRId64 "\t%s\t%s", r.index, r.key.c_str(), r.label ? r.label->c_str() : "-");
    for (const auto& [name, v] : r.embeddings) {
      std::printf("\t");
      for (std::size_t i = 0; i < v.size() && i < 8; ++i) std::printf("%s%.6g", i ? "," : "", v[i]);
      if (v.size() > 8) std::printf(",...(%zu)", v.size());
    }
    std::printf("\n");
  }
}

json verify_json(const verify::VerifyReport& r) {
  json j{{"path", r.path}, {"ok", r.ok()}, {"rows", r.rows}, {"encoders", json::array()}};
  for (const auto& e : r.encoders)
    j["encoders"].push_back({{"name", e.name}, {"ok", e.ok()}, {"encoder_path", e.encoder_path},
                             {"encoder_changed", e.encoder_changed}, {"checked", e.checked},
                             {"mismatched", e.mismatched}, {"max_abs_diff", e.max_abs_diff},
                             {"rtol", e.rtol}, {"atol", e.atol},
                             {"first_bad_row", e.first_bad_row}});
  return j;
}

void print_verify(const verify::VerifyReport& r) {
  for (const auto& e : r.encoders) {
    std::printf("%s\t%s\t", r.path.c_str(), e.name.c_str());
    if (e.ok())
      std::printf("ok: %" PRId64 " rows match (max abs diff %.3g, tolerance %g + %g*|x|)\n", e.checked,
                  e.max_abs_diff, e.atol, e.rtol);
    else if (e.encoder_changed && e.mismatched == 0)
      std::printf("STALE: encoder file %s changed since the cache was built\n", e.encoder_path.c_str());
    else
      std::printf("MISMATCH: %" PRId64 " of %" PRId64 " rows differ (first row %" PRId64
                  ", max abs diff %.3g)%s\n",
                  e.mismatched, e.checked, e.first_bad_row, e.max_abs_diff,
                  e.encoder_changed ? "; encoder file changed" : "");
  }
}

int run(Options& o) {
  json doc{{"schema", "cache-inspect/1"}, {"files", json::array()}};
  int status = 0;
  auto fail = [&](int code) {
    if (status == 0 || (status == 1 && code != 1)) status = code;
  };

  if (o.check) {
    for (const auto& f : o.files) {
      auto rep = cache::check(f);
      if (o.common.json) {
        doc["files"].push_back({{"path", f}, {"ok", rep.ok()}, {"problems", rep.problems}});
      } else if (!rep.ok()) {
        std::string all;
        for (const auto& p : rep.problems) all += (all.empty() ? "" : "; ") + p;
        std::printf("%s\t%s\n", f.c_str(), all.c_str());
      } else if (o.common.verbose) {
        std::printf("%s\tok\n", f.c_str());
      }
      if (!rep.ok()) status = 1;
    }
    if (o.common.json) std::printf("%s\n", doc.dump(2).c_str());
    return status;
  }

  std::map<std::string, std::string> overrides;
  for (const auto& spec : o.encoders) {
    auto [name, path] = cli::split_assignment(spec);
    if (!name) throw Error(Exit::usage, "--encoder", "expected NAME=PATH, got '" + spec + "'");
    overrides[*name] = path;
  }

  for (const auto& f : o.files) {
    try {
      json j;
      if (o.verify > 0) {
        verify::VerifyOptions v;
        v.cache = f;
        v.samples = o.verify;
        v.seed = o.seed;
        v.encoders = overrides;
        v.input = o.input;
        v.rtol = o.rtol;
        v.atol = o.atol;
        v.device = o.common.device;
        v.threads = o.common.threads;
        auto rep = verify::run_verify(v);
        if (o.common.json) doc["files"].push_back(verify_json(rep));
        else print_verify(rep);
        if (!rep.ok()) fail(1);
        continue;
      }
      auto info = cache::read_info(f);
      if (o.head > 0) {
        auto rows = cache::read_head(f, o.head);
        if (o.common.json) doc["files"].push_back({{"path", f}, {"rows", head_json(rows)}});
        else print_head(rows);
        continue;
      }
      j = info_json(info);
      if (!o.common.json) print_info(info);
      if (o.stats) {
        auto st = cache::compute_stats(f);
        if (o.common.json) j["stats"] = stats_json(st);
        else print_stats(st);
      }
      if (o.common.json) doc["files"].push_back(j);
    } catch (const Error& e) {
      cli::print_error(kTool, e.what());
      fail(cli::code(e.code()));
      if (o.common.json) doc["files"].push_back({{"path", f}, {"error", e.what()}});
    }
  }
  if (o.common.json) std::printf("%s\n", doc.dump(2).c_str());
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Summarise, check and verify traincache cache files.", kTool};
  Options o;
  cli::add_common_options(app, o.common, cli::Compute::full, runtime_info);
  app.add_option("files", o.files, "Cache files")->required();
  app.add_flag("--stats", o.stats, "Per-encoder row-norm statistics and NaN/Inf counts");
  auto* check = app.add_flag("--check", o.check,
                             "Exit 1 and list each file that is incomplete, inconsistent or non-finite");
  app.add_option("--verify", o.verify, "Re-encode K random rows with the recorded encoder and compare")
      ->check(cli::positive_integer())->excludes(check);
  app.add_option("--head", o.head, "Print the first N rows")->check(cli::positive_integer())->excludes(check);
  app.add_option("--seed", o.seed, "Seed of the --verify row sample")->capture_default_str();
  app.add_option("--encoder", o.encoders, "NAME=PATH: verify with this encoder file instead of the recorded one");
  app.add_option("--input", o.input, "Verify against this input file instead of the recorded one");
  app.add_option("--rtol", o.rtol, "Relative tolerance of --verify (default 1e-4 float32, 2e-3 float16)")
      ->check(cli::positive_number(true));
  app.add_option("--atol", o.atol, "Absolute tolerance of --verify")->check(cli::positive_number(true))->capture_default_str();
  app.footer(
      "EXIT STATUS\n  0 ok; 1 --check found a bad file or --verify a mismatch or changed encoder;\n"
      "  64 usage; 65 corrupt, foreign or newer-format file; 66 file missing; 69 CUDA unavailable;\n"
      "  70 internal error. With several files every file is processed; the status is that of the\n"
      "  first failure other than 1, else 1 if any file failed. See docs/cache-inspect.md.");
  return cli::run_tool(kTool, app, argc, argv, [&] { return run(o); });
}
