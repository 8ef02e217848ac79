// cache-fill: run frozen TorchScript encoders once over an HDF5 dataset and store the embeddings,
// labels and keys in a fingerprinted, resumable cache file. See docs/cache-fill.md.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "traincache/base/cores.h"
#include "traincache/base/cpu_contention.h"
#include "traincache/base/files.h"
#include "traincache/base/format.h"
#include "traincache/base/interrupt.h"
#include "traincache/cli/cli.h"
#include "traincache/fill/fill.h"
#include "traincache/fill/fill_plan.h"
#include "traincache/fill/merge.h"
#include "traincache/model/runtime.h"
#include "traincache/text/token_batches.h"
#include "traincache/train/dist_launch.h"

using namespace traincache;

namespace {

constexpr const char* kTool = "cache-fill";

struct Options {
  cli::CommonOptions common;
  fill::FillOptions fill;
  std::vector<std::string> encoders, features, outputs, text, tokenizers;
  std::string rows, input_scale = "1/255", shard, changes;
  bool no_optimize = false, merge_after = false;
  double merge_timeout = 3600;
  fill::MergeOptions merge;
};

// "I/N", or RANK and WORLD_SIZE from the environment (torchrun and other launchers set them).
void resolve_shard(Options& o) {
  std::string spec = o.shard;
  if (spec.empty()) {
    auto launch = train::read_launch();
    if (!launch.distributed()) return;
    spec = std::to_string(launch.rank) + "/" + std::to_string(launch.world_size);
  }
  auto slash = spec.find('/');
  auto i = slash == std::string::npos ? std::nullopt : cli::parse_int(spec.substr(0, slash));
  auto n = slash == std::string::npos ? std::nullopt : cli::parse_int(spec.substr(slash + 1));
  if (!i || !n || *n <= 0 || *i < 0 || *i >= *n)
    throw Error(Exit::usage, "--shard", "expected I/N with 0 <= I < N, got '" + spec + "'");
  o.fill.shard_index = static_cast<int>(*i);
  o.fill.shard_count = static_cast<int>(*n);
}

// Rank 0 with --merge: wait (at most --merge-timeout seconds; 0 = no limit) until every shard
// file is a complete cache, then merge them.
void merge_when_complete(Options& o) {
  std::vector<std::string> paths;
  for (int i = 0; i < o.fill.shard_count; ++i) paths.push_back(fill::shard_path(o.fill.out, i, o.fill.shard_count));
  fill::wait_for_shards(paths, o.merge_timeout);
  fill::merge_shards({o.fill.out, paths, false});
  if (!o.common.quiet)
    std::fprintf(stderr, "%s: %s: merged %d shards\n", kTool, o.fill.out.c_str(), o.fill.shard_count);
}

std::string stem(const std::string& path) {
  auto slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  auto dot = base.rfind('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

// Turns the repeatable NAME=VALUE options into per-encoder settings.
void resolve_encoders(Options& o) {
  for (const auto& spec : o.encoders) {
    auto [name, path] = cli::split_assignment(spec);
    o.fill.encoders.push_back({name ? *name : stem(path), path, {}, "", {}, ""});
  }
  auto find = [&](const std::string& name, const char* opt) -> fill::EncoderSpec& {
    for (auto& e : o.fill.encoders)
      if (e.name == name) return e;
    std::vector<std::string> have;
    for (const auto& e : o.fill.encoders) have.push_back(e.name);
    throw Error(Exit::usage, opt, "no encoder named '" + name + "' (have: " + name_list(have) + ")");
  };
  // --features and --text: "[NAME=]A,B" for one encoder or, without NAME=, for every encoder.
  auto lists = [&](const std::vector<std::string>& specs, const char* opt, const char* what,
                   std::vector<std::string> fill::EncoderSpec::*member, std::vector<std::string>& all) {
    for (const auto& spec : specs) {
      auto [name, list] = cli::split_assignment(spec);
      auto items = cli::split(list, ',');
      if (items.empty()) throw Error(Exit::usage, opt, std::string("empty ") + what + " list");
      (name ? find(*name, opt).*member : all) = items;
    }
  };
  lists(o.features, "--features", "dataset", &fill::EncoderSpec::features, o.fill.features);
  lists(o.text, "--text", "field", &fill::EncoderSpec::text, o.fill.text);
  for (const auto& spec : o.tokenizers) {
    auto [name, path] = cli::split_assignment(spec);
    if (name)
      find(*name, "--tokenizer").tokenizer = path;
    else
      o.fill.tokenizer = path;
  }
  for (const auto& spec : o.outputs) {
    auto [name, sel] = cli::split_assignment(spec);
    if (name)
      find(*name, "--output").output = sel;
    else
      for (auto& e : o.fill.encoders)
        if (e.output.empty()) e.output = sel;
  }
}

// A measured figure, or null where it was not (negative).
report::Json measured(double value) { return value >= 0 ? report::Json(value) : report::Json(nullptr); }

// How far the updated rows are expected to be from a full fill's, for the closing line ("" when not measured).
std::string expectation(double expected) {
  if (expected < 0) return "";
  if (expected == 0) return "; a full fill's bits";
  char buf[64];
  std::snprintf(buf, sizeof buf, "; expected within %.3g of a full fill", expected);
  return buf;
}

// One row of FillResult::changes as --json and --changes write it.
report::Json change_json(const fill::FillResult::RowChange& c) {
  report::Json key = nullptr;  // rows matched by position have none
  if (c.has_key) key = c.key;
  if (c.has_key && c.numeric_key) key = std::stoll(c.key);
  return report::Json{{"change", c.change},
                      {"row", c.row >= 0 ? report::Json(c.row) : report::Json(nullptr)},
                      {"old_row", c.old_row >= 0 ? report::Json(c.old_row) : report::Json(nullptr)},
                      {"key", key},
                      {"encoded", c.encoded}};
}

// --changes FILE: the run's changes as JSON Lines, written whole or not at all (empty when the
// cache was up to date).
void write_changes(const std::string& path, const fill::FillResult& r) {
  std::string text;
  for (const auto& c : r.changes) text += change_json(c).dump() + "\n";
  files::write_file_atomically(path, text);
}

// --update: what changed since the cache was made ("update": null for a fill without one).
void add_update(report::Record& rec, const fill::FillResult& r) {
  if (!r.update) {
    rec.add("update", report::Json(nullptr), "");
    rec.note("update_note", "");
    return;
  }
  const auto& u = *r.update;
  report::Json changes = report::Json::array();
  for (const auto& c : r.changes) changes.push_back(change_json(c));
  rec.add("update", report::Json{{"matched_by", u.by_key ? "key" : "position"},
                                 {"added", u.added},
                                 {"changed", u.changed},
                                 {"removed", u.removed},
                                 {"unchanged", u.unchanged},
                                 {"kept", u.unchanged},  // its name in 0.1: written until 0.2
                                 {"skipped_before", u.skipped_before},
                                 {"moved", u.moved},
                                 {"copies", u.copies},
                                 {"rows_copied", u.copied},
                                 {"seconds_saved", u.seconds_saved},
                                 {"max_abs_diff_expected", measured(u.max_abs_diff_expected)},
                                 // its name in 0.1, which read as a bound: written until 0.2
                                 {"max_abs_diff_allowed", measured(u.max_abs_diff_expected)},
                                 {"changes", changes}});
  char saved[64] = "";
  if (u.seconds_saved > 0) std::snprintf(saved, sizeof saved, ", about %.1f s saved", u.seconds_saved);
  const std::string again = u.skipped_before ? ", " + std::to_string(u.skipped_before) + " skipped before" : "";
  const std::string moved =
      (u.moved ? ", moved " + std::to_string(u.moved) : "") + (u.copies ? ", copies " + std::to_string(u.copies) : "");
  rec.note("update_note", ", " + std::to_string(r.rows_copied) + " copied; added " + std::to_string(u.added) +
                              ", changed " + std::to_string(u.changed) + again + moved + ", removed " +
                              std::to_string(u.removed) + ", unchanged " + std::to_string(u.unchanged) + saved +
                              expectation(u.max_abs_diff_expected));
}

// What to try when other processes held the cores. Fewer intra-op threads is not offered: beside two
// busy processes a fill with --threads 1 was as often slower as faster (docs/performance.md).
// What helps a fill beside busy processes, as measured (docs/performance.md, "Busy machines"): not
// its own options (--threads 1, --workers 1 and taskset -c on the fill alone were slower), only
// cores the others are kept off. The progress line says that the run is slowed, and no remedy.
constexpr const char* kContentionRemedy =
    "no option of cache-fill's helps (fewer --threads or --workers were slower); keep the other processes off some "
    "cores (a cgroup's cpuset, or taskset on them) for the fill, or run it when they finish";
constexpr const char* kLiveRemedy = "";

// Which stage bounded the run ("bottleneck": null when it encoded nothing); its text is the verdict.
void add_bottleneck(report::Record& rec, const fill::FillResult& r) {
  if (!r.bottleneck) {
    rec.add("bottleneck", report::Json(nullptr), "");
    return;
  }
  const auto& b = *r.bottleneck;
  report::Json stages = report::Json::array();
  for (const auto& s : b.stages)
    stages.push_back({{"name", s.name},
                      {"threads", s.threads},
                      {"busy_seconds", s.busy_seconds},
                      {"busy_share", s.busy_share},
                      {"rows_per_second", s.rows_per_second}});
  rec.add("bottleneck",
          report::Json{{"bound", b.bound},
                       {"group", b.group},
                       {"group_threads", b.group_threads},
                       {"convert_thread", b.convert_thread},
                       {"group_rows_per_second", b.group_rows_per_second},
                       {"rows_per_second", b.rows_per_second},
                       {"forward_rows_per_second", b.forward_rows_per_second},
                       {"model_fraction", b.model_fraction},
                       {"loop_seconds", b.loop_seconds},
                       {"fixed_seconds", b.fixed_seconds},
                       {"padding_share", b.padding_share < 0 ? report::Json(nullptr) : report::Json(b.padding_share)},
                       {"int8_instructions",
                        b.int8_instructions.empty() ? report::Json(nullptr) : report::Json(b.int8_instructions)},
                       {"stages", stages},
                       {"verdict", b.verdict}},
          b.verdict);
}

// With --decode device, where the files were decoded and the convert thread's time in it.
report::Json device_decode_json(const fill::FillResult& r) {
  if (!r.device_decode) return report::Json(nullptr);
  const auto& d = r.decoded;
  return report::Json{{"reader_files", d.reader_files},         {"device_files", d.device_files},
                      {"hardware_files", d.hardware_files},     {"host_files", d.host_files},
                      {"decode_seconds", d.decode_seconds},     {"prep_seconds", d.prep_seconds},
                      {"hardware_seconds", d.hardware_seconds}, {"hybrid_seconds", d.hybrid_seconds}};
}

// The result's fields, declared once: --json writes them, the text lines below name them.
report::Record fill_record(const fill::FillResult& r) {
  static const char* status[] = {"done", "up_to_date", "interrupted"};
  report::Record rec;
  rec.add("schema", "cache-fill/1")
      .add("status", status[static_cast<int>(r.status)])
      .add("out", r.out)
      .add("rows", r.rows)
      .add("rows_encoded", r.rows_encoded)
      .add("rows_copied", r.rows_copied)
      .add("resumed_from", r.resumed_from)
      .add("seconds", r.seconds)
      .add("encode_seconds", r.encode_seconds)
      .add("model_setup_seconds", r.model_setup_seconds)
      .add("digest_seconds", r.digest_seconds)
      .add("publish_seconds", r.publish_seconds)
      .add("input_wait_seconds", r.input_wait_seconds)
      .add("store_seconds", r.store_seconds)
      .add("convert", r.device_convert ? "device" : "host")
      .add("decode", r.device_decode ? "device" : "host")
      .add("device_decode", device_decode_json(r))
      .add("image_simd", r.image_simd.empty() ? report::Json(nullptr) : report::Json(r.image_simd))
      .add("rows_per_second", r.seconds > 0 ? r.rows_encoded / r.seconds : 0.0)
      .add("bytes_written", r.bytes_written)
      .add("skipped", r.skipped)
      .add("utf8_replaced", r.utf8_replaced)
      .add("max_length", r.max_length)
      .add("texts_cut", r.texts_cut)
      .add("length_window", r.length_window)
      .add("max_tokens", r.max_tokens)
      .add("tokens", r.tokens)
      .add("token_slots", r.token_slots)
      .add("fingerprint", r.fingerprint)
      .add("refilled", r.refilled.empty() ? report::Json(nullptr) : report::Json(r.refilled));
  rec.note("refill_note", r.refilled.empty() ? "" : ", filled again: " + r.refilled);
  report::Json encoders = report::Json::array();
  std::string text;
  for (const auto& e : r.encoders) {
    encoders.push_back({{"name", e.name},
                        {"shape", e.shape},
                        {"inference", e.inference},
                        {"optimize_max_abs_diff", e.optimize_max_abs_diff},
                        {"batch_max_abs_diff", measured(e.batch_max_abs_diff)},
                        {"batch_max_rel_diff", measured(e.batch_max_rel_diff)},
                        {"math_mode", e.math_mode},
                        {"precision", e.precision},
                        {"precision_max_rel_diff", e.precision_max_rel_diff}});
    text += (text.empty() ? "" : ", ") + e.name + " " + shape_text(e.shape) + " " + e.inference;
  }
  rec.add("encoders", encoders, text);
  add_update(rec, r);
  add_bottleneck(rec, r);
  cli::add_contention(rec, r.contention, kContentionRemedy);
  if (!r.partial_path.empty()) rec.add("partial", r.partial_path);
  rec.note("resumed", r.resumed_from ? ", resumed at " + std::to_string(r.resumed_from) : "");
  rec.note("skipped_note", r.skipped ? ", " + std::to_string(r.skipped) + " skipped (see /skipped)" : "");
  rec.note("cut_note", r.texts_cut ? ", " + std::to_string(r.texts_cut) + (r.texts_cut == 1 ? " text" : " texts") +
                                         " cut at " + std::to_string(r.max_length) + " tokens"
                                   : "");
  return rec;
}

constexpr const char* kDoneText =
    "{out}: {rows} rows ({rows_encoded} encoded{update_note}{refill_note}{resumed}{skipped_note}{cut_note}) in "
    "{seconds:%.2f} s, "
    "{rows_per_second:%.0f} "
    "rows/s; "
    "{encoders}";
constexpr const char* kUpToDateText = "{out}: up to date ({rows} rows, fingerprint {fingerprint:%.12s})";
constexpr const char* kInterruptedText =
    "interrupted after {rows} rows; progress kept in {partial} (run the same command again to resume)";

int run(Options& o) {
  for (auto [given, flag] : {std::pair{!o.fill.input.empty(), "--input"}, std::pair{!o.encoders.empty(), "--encoder"},
                             std::pair{!o.fill.out.empty(), "--out"}})
    if (!given) throw Error(Exit::usage, "", std::string(flag) + " is required (see --help)");
  resolve_shard(o);
  // One process under a launcher (WORLD_SIZE=1: torchrun on a one-GPU machine) writes the whole
  // cache itself: there is nothing to merge, and the same line serves every machine.
  if (o.merge_after && o.fill.shard_count <= 0 && !std::getenv("WORLD_SIZE"))
    throw Error(Exit::usage, "--merge", "needs --shard I/N (or RANK/WORLD_SIZE)");
  resolve_encoders(o);
  o.fill.optimize = !o.no_optimize;
  o.fill.list_changes = !o.changes.empty();
  // --changes is written after the cache: a folder it cannot be written in is refused before any work.
  if (o.fill.list_changes && access(files::dir_name(o.changes).c_str(), W_OK | X_OK) != 0)
    throw Error(Exit::cant_create, o.changes, std::string("cannot be written: ") + std::strerror(errno));
  // Under torchrun: one GPU per process (--device cuda is cuda:LOCAL_RANK) and a share of the cores.
  const train::Launch launch = train::read_launch();
  o.fill.threads = train::local_threads(o.common.threads, launch, static_cast<int>(usable_cores()));
  o.fill.device = train::local_device(o.common.device, launch);
  o.fill.input_scale = cli::parse_fraction(o.input_scale, "--input-scale");
  if (!o.rows.empty()) std::tie(o.fill.row_begin, o.fill.row_end) = cli::parse_row_range(o.rows);
  install_interrupt_handlers(std::string(kTool) +
                             ": interrupted: stopping after this batch, what is encoded kept (run the same command "
                             "again to resume); interrupt again to stop at once");

  fill::FillCallbacks cb;
  std::unique_ptr<Progress> progress;
  CpuContentionWatch live;  // for the progress line; the run's own watch gives the closing note
  cb.progress = [&](int64_t done, int64_t total) {
    if (!progress) progress = std::make_unique<Progress>("encoding", total, o.common.progress_mode());
    progress->update(done, slowed_note(live.recent(), kLiveRemedy));
  };
  cb.warn = [&](const std::string& m) {
    if (!o.common.quiet) cli::print_warning(kTool, m);
  };
  fill::FillResult r = fill::run_fill_in_module(o.fill, cb);
  if (progress) progress->finish();

  auto rec = fill_record(r);
  if (r.status == fill::FillStatus::interrupted) {
    if (o.common.json) report::print_json(rec.json());
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", kTool, rec.format(kInterruptedText).c_str());
    return cli::code(Exit::interrupted);
  }
  if (!o.changes.empty()) write_changes(o.changes, r);
  if (r.status == fill::FillStatus::up_to_date)
    cli::print_result(kTool, o.common, rec, {kUpToDateText});
  else
    cli::print_result(kTool, o.common, rec,
                      {kDoneText, r.bottleneck ? "{bottleneck}" : "", r.contention.competed() ? "{contention}" : ""});
  if (o.merge_after && o.fill.shard_count > 0 && o.fill.shard_index == 0) merge_when_complete(o);
  return 0;
}

int run_merge(Options& o) {
  fill::merge_shards(o.merge);
  report::Record rec;
  rec.add("schema", "cache-fill/1")
      .add("status", "merged")
      .add("out", o.merge.out)
      .add("shards", o.merge.shards.size())
      .add("copy", o.merge.copy);
  rec.note("how", o.merge.copy ? "copied" : "virtual datasets");
  cli::print_result(kTool, o.common, rec, {"{out}: merged {shards} shards ({how})"});
  return 0;
}

}  // namespace

// The merge subcommand, with its own exit status.
CLI::App* add_merge_command(CLI::App& app, Options& o) {
  auto* merge = app.add_subcommand("merge", "Merge the shard files of one job into one cache");
  merge->add_option("-o,--out", o.merge.out, "Merged cache file")->required();
  merge->add_option("shards", o.merge.shards, "Shard files")->required();
  merge->add_flag("--copy", o.merge.copy, "Copy the data (default: HDF5 virtual datasets over the shard files)");
  merge->fallthrough();
  merge->footer(
      "EXIT STATUS\n"
      "  0 merged; 64 usage; 65 a shard is not a complete cache of the same job, or shards are\n"
      "  missing or repeated; 66 a shard file missing; 73 output in the way or not creatable;\n"
      "  74 I/O error; 75 another cache-fill merge holds the output. See docs/cache-fill.md.");
  return merge;
}

// The text fields and their tokenizers.
void add_text_options(CLI::App& app, Options& o) {
  const char* text_group = "Text";
  app.add_option("--text", o.text,
                 "[NAME=]FIELD[,FIELD...]: text fields of a .jsonl/.csv/.tsv manifest or HDF5 string datasets, "
                 "tokenized and fed as input_ids, attention_mask (and token_type_ids to a 3-input forward)")
      ->group(text_group);
  app.add_option("--tokenizer", o.tokenizers, "[NAME=]FILE: Hugging Face tokenizer.json or SentencePiece .model")
      ->group(text_group);
  cli::add_tokenize_options(app, o.fill.tokenize, text_group);
  app.add_option("--length-window", o.fill.length_window,
                 "Sort the texts of each window of ROWS rows by length and encode them in batches of similar "
                 "length (default: 16 batches; 0: off)")
      ->check(cli::integer_range(0, INT64_MAX))
      ->group(text_group);
  app.add_option(
         "--max-tokens", o.fill.max_tokens,
         "A length window's batches hold at most N token slots: rows times the longest row's tokens (default: " +
             std::to_string(text::kDefaultMaxTokensCpu) + " on a CPU, " + std::to_string(text::kDefaultMaxTokensCuda) +
             " on CUDA; 0: --batch-size rows each)")
      ->check(cli::integer_range(0, INT64_MAX))
      ->group(text_group);
}

// How the encoders run: the first batch's checks, precision, where inputs are converted and decoded.
void add_model_options(CLI::App& app, Options& o) {
  app.add_flag("--check-determinism", o.fill.check_determinism,
               "Encode the first batch twice and fail (65) if the outputs differ");
  app.add_flag("--no-optimize", o.no_optimize, "Run the plain module (no freeze/optimize_for_inference)");
  cli::add_choice(app, "--precision", o.fill.precision, model::precision_choices(),
                  "fp32, bf16 (autocast, CPU or CUDA), fp16 (CUDA) or int8 (linear layers, CPU): after a "
                  "first-batch check against float32");
  cli::add_tf32_option(app, &o.fill.tf32);
  cli::add_choice(app, "--convert", o.fill.convert, fill::convert_choices(),
                  "Where images and uint8 inputs become float32: host (reader threads) or device (8-bit rows "
                  "copied to the encoders' device); auto: device for CUDA");
  cli::add_choice(app, "--decode", o.fill.decode, fill::decode_choices(),
                  "Where JPEG files are decoded: host (reader threads) or device (baseline ones by nvJPEG on "
                  "CUDA, the others by the reader threads; needs the conversion there); auto: device for "
                  "CUDA when nvJPEG is built in");
  app.add_option_function<double>(
      "--precision-tolerance", [&o](double v) { o.fill.precision_tolerance = v; },
      "Largest first-batch difference from float32, relative to its largest value (default 0.02; int8: 0.25)");
}

// --help's examples and exit codes.
constexpr const char* kFooter =
    "EXAMPLES\n"
    "  cache-fill --input photos/ --resize 256 --center-crop 224 --channels rgb --normalize imagenet \\\n"
    "             --encoder resnet18=resnet18.pt --out photos.h5\n"
    "  cache-fill --input pairs.jsonl --text passage --tokenizer tokenizer.json --max-length 128 \\\n"
    "             --encoder text=encoder.pt --key id --out passages.h5\n"
    "  cache-fill --input data.h5 --features images --labels labels --encoder cnn.pt \\\n"
    "             --shard 0/4 --out cache.h5     # one of 4 processes; then: cache-fill merge\n"
    "  cache-fill --input 'shards/{0000..0004}.tar' --features jpg --labels cls --encoder cnn.pt \\\n"
    "             --out cache.h5 --update        # a shard was added: encode only its samples\n\n"
    "EXIT STATUS\n"
    "  0 done or up to date; 64 usage; 65 bad data (corrupt input, shape/dtype, NaN, a tokenizer or\n"
    "  text the encoder cannot take); 66 input or encoder missing; 69 CUDA or LibTorch's module\n"
    "  (libtraincache_engines.so) unavailable, or out of memory (progress kept); 70 internal;\n"
    "  73 output in the way or not creatable, or a cache --update cannot update; 74 I/O error;\n"
    "  75 another run holds the output, or\n"
    "  --merge gave up waiting for shards, or an encoder file changed between its digest and its load;\n"
    "  130 interrupted (what was encoded is kept: run again to resume).\n"
    "See docs/cache-fill.md.";

int main(int argc, char** argv) {
  CLI::App app{"Encode a dataset once with frozen TorchScript encoders into a cache file.", kTool};
  Options o;
  cli::add_common_options(app, o.common, cli::Compute::full, model::runtime_info_in_module);
  app.add_option("-i,--input", o.fill.input,
                 "Input: HDF5 file, .npy file, .npz archive, shm:NAME, image folder, .csv/.tsv/.jsonl manifest "
                 "or WebDataset tar shards ('s/{00000..00099}.tar', a glob, a .tar.gz) (required)");
  app.add_option("-e,--encoder", o.encoders, "[NAME=]model.pt (repeatable; NAME defaults to the file stem; required)");
  app.add_option("-f,--features", o.features,
                 "[NAME=]DATASET[,DATASET...]: input datasets, .npz members, .npy files, a manifest's path field or a "
                 "tar shard's image field (jpg) "
                 "fed to the encoders (NAME= for one encoder)");
  app.add_option("--labels", o.fill.labels,
                 "[NAME=]SOURCE[,...]: label columns, each a dataset or manifest field (folder: label; tar: cls, "
                 "json.FIELD), a .npy file, or TABLE:FIELD of a CSV/TSV/JSON Lines/.npz table joined on the keys")
      ->type_name("LIST");
  app.add_option("--key", o.fill.keys,
                 "Per-row key dataset or manifest field, integers or strings (folder: path; tar: __key__)");
  app.add_option("-o,--out", o.fill.out, "Output cache file (required)");
  app.add_option("--shard", o.shard, "Encode shard I/N into OUT.shard-I-of-N (default: RANK/WORLD_SIZE if set)");
  app.add_flag("--merge", o.merge_after, "With --shard: shard 0 waits for all shards, then merges them into OUT");
  app.add_option("--merge-timeout", o.merge_timeout, "Seconds shard 0 waits for the others with --merge (0: no limit)")
      ->check(cli::positive_number(true))
      ->capture_default_str();
  CLI::App* merge = add_merge_command(app, o);
  app.add_option("--output", o.outputs, "[NAME=]KEY|INDEX: the tensor to keep from a tuple/dict output");
  app.add_option("-b,--batch-size", o.fill.batch_size, "Rows per encoder call")
      ->check(cli::positive_integer())
      ->capture_default_str();
  app.add_option("--workers", o.fill.workers,
                 "Reader/converter threads prefetching batches (auto: up to 4 for images decoded on the host, "
                 "as the cores allow; else 1)")
      ->transform(cli::auto_or_integer(64))
      ->type_name("auto|N")
      ->default_str("auto");
  cli::add_choice(app, "--dtype", o.fill.dtype, fill::storage_dtype_choices(), "Storage dtype");
  app.add_option("--rows", o.rows, "Encode only input rows A:B (half-open)");
  app.add_option("--input-scale", o.input_scale, "Scale applied to uint8 inputs (number or A/B)")
      ->capture_default_str();
  app.add_option("--commit-rows", o.fill.commit_rows, "Rows between durable progress commits")
      ->check(cli::positive_integer())
      ->capture_default_str();
  app.add_flag("--force", o.fill.force, "Overwrite a cache or partial progress with another fingerprint");
  app.add_flag("--update", o.fill.update,
               "When only the input's data (or its labels, keys, batch size) changed, copy the cache's "
               "unchanged rows and encode only the new and changed ones; with --force, fill again a cache "
               "it cannot update (another encoder, preprocessing or options; damaged)");
  app.add_option("--changes", o.changes,
                 "Write the rows the run added, changed, moved, re-read or removed to FILE, as JSON Lines "
                 "(with their keys; empty when up to date)")
      ->type_name("FILE");
  add_model_options(app, o);
  add_text_options(app, o);
  cli::add_file_options(app, o.fill.files, "Images and manifests");
  app.add_flag("--trust-slab-owner", o.fill.files.trust_slab_owner, "Read an --input shm:NAME slab of another user")
      ->group("Images and manifests");
  cli::add_choice(app, "--on-error", o.fill.on_error, fill::on_error_choices(),
                  "Images that cannot be read: fail, or skip them (zero rows listed in /skipped)")
      ->group("Images and manifests");
  app.footer(kFooter);
  return cli::end_process(cli::run_tool(kTool, app, argc, argv, [&] {
    cli::refuse_repeated(app, {"--input", "--out"});
    return merge->parsed() ? run_merge(o) : run(o);
  }));
}
