// cache-inspect: summarise, check and verify traincache cache files. See docs/cache-inspect.md.
#include <sys/stat.h>

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "traincache/base/format.h"
#include "traincache/base/interrupt.h"
#include "traincache/cli/cli.h"
#include "traincache/fill/verify.h"
#include "traincache/io/cache_export.h"
#include "traincache/io/cache_file.h"
#include "traincache/io/describe.h"
#include "traincache/model/runtime.h"

using namespace traincache;
using json = report::Json;

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
  std::vector<std::string> export_to;  // FORMAT DIR
  int64_t rows_per_file = 1000000;
  bool normalize = false;
  std::string labels;  // --export's label column
};

// Each result's fields are declared once (the summary's and the statistics' in describe.h): --json
// writes the records, text output fills the templates that follow each record from the same fields.

constexpr const char* kInfoText =
    "{path}\n  format       {format} v{format_version}, {complete}\n"
    "  rows         {rows} (input rows {row_start}..{row_end})\n  created by   {created_by}\n"
    "  input        {input_path} ({input_kind}) [{features}], {scale}\n"
    "  preprocess   {preprocess}\n{text}  fingerprint  {fingerprint}\n"
    "{embeddings}  labels       {labels}\n  keys         {keys}\n  skipped      {skipped}\n  history      {history}";

constexpr const char* kStatsText =
    "  stats/{name}  norm mean {norm_mean:%.6g} std {norm_std:%.6g} min {norm_min:%.6g} max {norm_max:%.6g}; "
    "NaN {nan_count}, Inf {inf_count}";

report::Record head_record(const io::cache::CacheRow& row) {
  report::Record r;
  report::Json embeddings = report::Json::object(), labels = report::Json::object(), classes(row.classes);
  std::string text, first, more;  // the first label column's text; more: the others', a column each
  for (std::size_t i = 0; i < row.labels.size(); ++i) {
    const auto& [column, value] = row.labels[i];
    labels[column] = value;
    const auto name = row.classes.find(column);
    const std::string shown = name == row.classes.end() ? value : value + " (" + name->second + ")";
    (i == 0 ? first : more) += (i == 0 ? "" : "\t") + shown;
  }
  char num[32];
  for (const auto& [name, v] : row.embeddings) {
    embeddings[name] = v;
    text += "\t";
    for (std::size_t i = 0; i < v.size() && i < 8; ++i) {
      std::snprintf(num, sizeof num, "%s%.6g", i ? "," : "", v[i]);
      text += num;
    }
    if (v.size() > 8) text += ",...(" + std::to_string(v.size()) + ")";
  }
  r.add("row", row.index)
      .add("key", row.key)
      .add("label", row.label ? report::Json(*row.label) : report::Json(nullptr),
           row.label ? std::optional<std::string>(first) : std::nullopt)
      .add("label_name", row.label && row.classes.count(row.labels[0].first)
                             ? report::Json(row.classes.at(row.labels[0].first))
                             : report::Json(nullptr))
      .add("labels", labels, more)
      .add("label_names", classes)
      .add("embeddings", embeddings, text);
  return r;
}

report::Record verify_record(const fill::EncoderVerdict& e) {
  report::Record r;
  r.add("name", e.name)
      .add("ok", e.ok())
      .add("encoder_path", e.encoder_path)
      .add("encoder_changed", e.encoder_changed)
      .add("checked", e.checked)
      .add("mismatched", e.mismatched)
      .add("max_abs_diff", e.max_abs_diff)
      .add("rtol", e.rtol)
      .add("atol", e.atol)
      .add("first_bad_row", e.first_bad_row);
  r.note("changed_note", e.encoder_changed ? "; encoder file changed" : "");
  return r;
}

const char* verify_text(const fill::EncoderVerdict& e) {
  if (e.ok()) return "ok: {checked} rows match (max abs diff {max_abs_diff:%.3g}, tolerance {atol} + {rtol}*|x|)";
  if (e.encoder_changed && e.mismatched == 0)
    return "STALE: encoder file {encoder_path} changed since the cache was built";
  return "MISMATCH: {mismatched} of {checked} rows differ (first row {first_bad_row}, max abs diff "
         "{max_abs_diff:%.3g}){changed_note}";
}

report::Record check_record(const std::string& path, const io::cache::CheckReport& rep) {
  std::string all;
  for (const auto& p : rep.problems) all += (all.empty() ? "" : "; ") + p;
  report::Record r;
  r.add("path", path).add("ok", rep.ok()).add("problems", rep.problems, rep.ok() ? "ok" : all);
  return r;
}

// --export npy DIR: one cache's rows as .npy files and JSON Lines; a summary line (--json: a document).
int export_files(const Options& o) {
  // SIGINT/SIGTERM: stop, the unfinished export removed (130)
  install_interrupt_handlers(std::string(kTool) + ": interrupted: stopping; the unfinished export is removed");
  if (o.export_to.size() == 1 && o.files.size() > 1)  // an option came between the format and the folder
    throw Error(Exit::usage, "--export",
                "expected a format and a folder, got '" + o.export_to[0] +
                    "' alone: write the folder right after the format (--export npy DIR CACHE)");
  if (o.export_to.size() != 2) throw Error(Exit::usage, "--export", "expected a format and a folder: --export npy DIR");
  if (o.files.size() != 1)
    throw Error(Exit::usage, "--export", "exports one cache at a time, not " + std::to_string(o.files.size()));
  if (o.export_to[0] != "npy" && o.export_to[1] == "npy")
    throw Error(Exit::usage, "--export", "the format comes first: --export npy " + o.export_to[0]);
  if (o.export_to[0] != "npy")
    throw Error(Exit::usage, "--export", "unknown format '" + o.export_to[0] + "' (npy is the one there is)");
  if (o.export_to[1].empty()) throw Error(Exit::usage, "--export", "the folder's name is empty: --export npy DIR");
  struct stat st;
  if (::stat(o.export_to[1].c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::stat(o.files[0].c_str(), &st) != 0)
    throw Error(Exit::usage, "--export",
                "'" + o.export_to[1] + "' is a file and '" + o.files[0] + "' does not exist: the folder comes first, " +
                    "--export npy DIR CACHE");
  io::cache::ExportOptions e;
  e.cache = o.files[0];
  e.dir = o.export_to[1];
  e.rows_per_file = o.rows_per_file;
  e.normalize = o.normalize;
  e.labels = o.labels;
  const auto r = io::cache::export_npy(e);
  if (r.stale_removed > 0 && !o.common.quiet)
    cli::print_warning(kTool, e.dir + ": removed " + std::to_string(r.stale_removed) +
                                  " unfinished export(s) to it that a killed run had left");
  if (r.nonfinite_rows > 0 && !o.common.quiet)
    cli::print_warning(kTool, e.cache + ": exported rows holding NaN or Inf: " + std::to_string(r.nonfinite_rows) +
                                  " (copied as they are; cache-inspect --check fails this cache)");
  report::Record rec;
  rec.add("path", e.cache).add("dir", r.dir).add("rows", r.rows).add("files", r.files).add("encoders", r.encoders);
  if (o.common.json)
    report::print_json({{"schema", "cache-inspect/1"}, {"export", rec.json()}});
  else if (!o.common.quiet)
    std::fprintf(stderr, "%s: %s\n", kTool,
                 rec.format("{path}: {rows} rows exported to {dir} ({files} files per encoder)").c_str());
  return 0;
}

// --check: each file's problems (all files, -v or --json; else only the bad ones); 1 if any is bad.
int check_files(const Options& o) {
  json doc{{"schema", "cache-inspect/1"}, {"files", json::array()}};
  int status = 0;
  for (const auto& f : o.files) {
    auto rep = io::cache::check(f);
    auto rec = check_record(f, rep);
    if (o.common.json)
      doc["files"].push_back(rec.json());
    else if (!rep.ok() || o.common.verbose)
      std::printf("%s\n", rec.format("{path}\t{problems}").c_str());
    if (!rep.ok()) status = 1;
  }
  if (o.common.json) report::print_json(doc);
  return status;
}

// --verify K of one file (`overrides`: --encoder NAME=PATH): a line per encoder, or its --json
// entry in `files`. Returns whether every encoder matched.
bool verify_file(const Options& o, const std::string& f, const std::map<std::string, std::string>& overrides,
                 json& files) {
  fill::VerifyOptions v;
  v.cache = f;
  v.samples = o.verify;
  v.seed = o.seed;
  v.encoders = overrides;
  v.input = o.input;
  v.rtol = o.rtol;
  v.atol = o.atol;
  v.device = o.common.device;
  v.threads = o.common.threads;
  auto rep = fill::run_verify_in_module(v);
  report::Json encoders = report::Json::array();
  for (const auto& e : rep.encoders) {
    auto rec = verify_record(e);
    encoders.push_back(rec.json());
    if (!o.common.json)
      std::printf("%s\t%s\n", rep.path.c_str(), rec.format("{name}\t" + std::string(verify_text(e))).c_str());
  }
  if (o.common.json)
    files.push_back({{"path", rep.path}, {"ok", rep.ok()}, {"rows", rep.rows}, {"encoders", encoders}});
  return rep.ok();
}

// --head N of one file: a table of its first rows, or their --json entry in `files`.
void head_file(const Options& o, const std::string& f, json& files) {
  io::cache::read_info(f);  // what is not a readable cache is refused as the summary refuses it
  auto rows = io::cache::read_head(f, o.head);
  report::Json out = report::Json::array();
  if (!o.common.json && !rows.empty()) {
    std::printf("row\tkey\tlabel");
    for (std::size_t i = 1; i < rows[0].labels.size(); ++i) std::printf("\t%s", rows[0].labels[i].first.c_str());
    for (const auto& [name, v] : rows[0].embeddings) std::printf("\t%s", name.c_str());
    std::printf("\n");
  }
  for (const auto& row : rows) {
    auto rec = head_record(row);
    if (o.common.json)
      out.push_back(rec.json());
    else
      std::printf("%s\n", rec.format("{row}\t{key}\t{label}{labels}{embeddings}").c_str());
  }
  if (o.common.json) files.push_back({{"path", f}, {"rows", out}});
}

// One file's summary, with --stats each encoder's statistics; or its --json entry in `files`.
void describe_file(const Options& o, const std::string& f, json& files) {
  auto rec = io::describe::cache_record(io::cache::read_info(f));
  json j = rec.json();
  if (!o.common.json) std::printf("%s\n", rec.format(kInfoText).c_str());
  if (o.stats) {
    report::Json stats = report::Json::array();
    for (const auto& st : io::cache::compute_stats(f)) {
      auto srec = io::describe::stats_record(st);
      stats.push_back(srec.json());
      if (!o.common.json) std::printf("%s\n", srec.format(kStatsText).c_str());
    }
    if (o.common.json) j["stats"] = stats;
  }
  if (o.common.json) files.push_back(j);
}

int run(Options& o) {
  if (o.check) return check_files(o);
  if (!o.export_to.empty()) return export_files(o);

  std::map<std::string, std::string> overrides;
  for (const auto& spec : o.encoders) {
    auto [name, path] = cli::split_assignment(spec);
    if (!name) throw Error(Exit::usage, "--encoder", "expected NAME=PATH, got '" + spec + "'");
    overrides[*name] = path;
  }
  json doc{{"schema", "cache-inspect/1"}, {"files", json::array()}};
  int status = 0;  // the first failure's code, except that 1 (a mismatch) gives way to errors
  auto fail = [&](int code) {
    if (status == 0 || (status == 1 && code != 1)) status = code;
  };
  for (const auto& f : o.files) {
    try {
      if (o.verify > 0) {
        if (!verify_file(o, f, overrides, doc["files"])) fail(1);
      } else if (o.head > 0) {
        head_file(o, f, doc["files"]);
      } else {
        describe_file(o, f, doc["files"]);
      }
    } catch (const Error& e) {
      cli::print_error(kTool, e.what());
      fail(cli::code(e.code()));
      if (o.common.json) doc["files"].push_back({{"path", f}, {"error", e.what()}});
    }
  }
  if (o.common.json) report::print_json(doc);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Summarise, check and verify traincache cache files.", kTool};
  Options o;
  cli::add_common_options(app, o.common, cli::Compute::full, model::runtime_info_in_module);
  app.add_option("files", o.files, "Cache files")->required();
  app.add_flag("--stats", o.stats, "Per-encoder row-norm statistics and NaN/Inf counts");
  auto* check =
      app.add_flag("--check", o.check, "Exit 1 and list each file that is incomplete, inconsistent or non-finite");
  app.add_option("--verify", o.verify, "Re-encode K random rows with the recorded encoder and compare")
      ->check(cli::positive_integer())
      ->excludes(check);
  auto* exp = app.add_option("--export", o.export_to,
                             "npy DIR: write the cache's embeddings as .npy files, its keys and labels as JSON Lines, "
                             "into the new folder DIR")
                  ->expected(2)
                  ->allow_extra_args(false)  // two values, then the cache file: never a third value
                  ->excludes(check);
  app.add_option("--rows-per-file", o.rows_per_file, "Rows in each file --export writes")
      ->check(cli::positive_integer())
      ->capture_default_str()
      ->needs(exp);
  app.add_flag("--normalize", o.normalize,
               "With --export: scale each vector to unit L2 norm (along the last axis) and write float32, "
               "for inner-product search")
      ->needs(exp);
  app.add_option("--labels", o.labels,
                 "With --export: the label column written as each row's label, by name (default: the first)")
      ->needs(exp);
  app.add_option("--head", o.head, "Print the first N rows")->check(cli::positive_integer())->excludes(check);
  app.add_option("--seed", o.seed, "Seed of the --verify row sample")->capture_default_str();
  app.add_option("--encoder", o.encoders, "NAME=PATH: verify with this encoder file instead of the recorded one");
  app.add_option("--input", o.input, "Verify against this input file instead of the recorded one");
  app.add_option("--rtol", o.rtol, "Relative tolerance of --verify (default 1e-4 float32, 2e-3 float16)")
      ->check(cli::positive_number(true));
  app.add_option("--atol", o.atol, "Absolute tolerance of --verify")
      ->check(cli::positive_number(true))
      ->capture_default_str();
  app.footer(
      "EXAMPLES\n"
      "  cache-inspect cache.h5\n"
      "  cache-inspect --check --json shards/*.h5\n"
      "  cache-inspect --verify 32 cache.h5\n"
      "  cache-inspect --head 5 cache.h5\n"
      "  cache-inspect --export npy vectors/ cache.h5\n\n"
      "EXIT STATUS\n  0 ok; 1 --check found a bad file or --verify a mismatch or changed encoder;\n"
      "  64 usage; 65 corrupt, foreign or newer-format file; 66 file missing; 69 CUDA or\n"
      "  libtraincache_engines.so (LibTorch, for --verify and --version) unavailable;\n"
      "  70 internal error; 73 --export: DIR exists or cannot be created; 74 I/O error;\n"
      "  130 --export interrupted (the unfinished folder removed).\n"
      "  With several files every file is processed; the status is that of the\n"
      "  first failure other than 1, else 1 if any file failed. See docs/cache-inspect.md.");
  return cli::end_process(cli::run_tool(kTool, app, argc, argv, [&] { return run(o); }));
}
