// gc-train: gradient-cached contrastive training on cached embeddings or raw inputs.
// See docs/gc-train.md.
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "traincache/base/cores.h"
#include "traincache/base/cpu_contention.h"
#include "traincache/base/interrupt.h"
#include "traincache/cli/cli.h"
#include "traincache/model/runtime.h"
#include "traincache/slab/shm_slab.h"
#include "traincache/text/token_batches.h"
#include "traincache/train/dist_launch.h"
#include "traincache/train/train.h"
#include "traincache/train/train_plan.h"

using namespace traincache;

namespace {

constexpr const char* kTool = "gc-train";

struct Options {
  cli::CommonOptions common;
  train::TrainOptions t;
  std::string query, passage, negatives, chunk, eval_rows, eval_k, input_scale = "1/255";
  std::string data_cache = "none", data_cache_limit, data_cache_keep;
  bool no_gradcache = false, no_shuffle = false, no_drop_last = false;
  std::vector<std::string> cache_devices, tokenizers;
};

// An evaluation's text: each metric (with its 95% interval when --eval-bootstrap asked for one)
// and how many queries it averages over.
std::string eval_text(const train::EvalMetrics& m) {
  if (m.queries == 0) return "no queries: each of the " + std::to_string(m.rows) + " rows is alone in its class";
  std::string text;
  char buf[96];
  for (const auto& x : m.metrics) {
    if (std::isnan(x.lo))
      std::snprintf(buf, sizeof buf, "%s %.4f", x.label.c_str(), x.value);
    else
      std::snprintf(buf, sizeof buf, "%s %.4f [%.4f, %.4f]", x.label.c_str(), x.value, x.lo, x.hi);
    text += (text.empty() ? "" : ", ") + std::string(buf);
  }
  text += " (" + std::to_string(m.queries) + " queries";
  // Rows alone in their class are no retrieval queries; a classifier's accuracy counts them.
  if (m.excluded > 0)
    text += "; " + std::to_string(m.excluded) + " alone in their class " +
            (m.queries + m.excluded > m.rows ? "without retrieval metrics" : "left out");
  return text + ")";
}

// Evaluation metrics as one field: JSON object (null without evaluation) and its text.
void add_eval(report::Record& rec, const std::string& key, const train::EvalMetrics& m) {
  if (m.present)
    rec.add(key, train::eval_json(m), eval_text(m));
  else
    rec.add(key, nullptr);
}

// The result's fields, declared once: --json writes them, the text lines below name them.
// --data-cache smart: the window's size and what each epoch boundary found (null otherwise).
report::Json window_json(const train::TrainResult& r) {
  if (r.window_rows == 0) return nullptr;
  auto epochs = report::Json::array();
  for (const auto& e : r.window_epochs)
    epochs.push_back({{"epoch", e.epoch}, {"late_rows", e.late_rows}, {"wait_seconds", e.wait_seconds}});
  return {{"cache_num", r.window_rows},
          {"replace_num", r.window_replace},
          {"replaced", r.data_cache ? r.data_cache->replaced : 0},
          {"epochs", epochs}};
}

// What to try when other processes held the cores: fewer threads, as many as they left free (beside
// two busy processes on 2 cores, --threads 1 trained 1.5-2x faster than 2 threads: a step's
// threads wait for the slowest of them), or cores of the run's own.
// `live`: the progress line's short form, which offers fewer threads only.
std::string contention_remedy(const CpuContention& c, int threads, bool live = false) {
  const int free_cores = std::max(1, static_cast<int>(std::lround(c.cores - c.others_cores)));
  const std::string own = "give the run cores of its own (taskset -c, a cgroup's cpuset)";
  if (free_cores >= threads) return live ? "" : own;
  const std::string fewer = "try --threads " + std::to_string(free_cores);
  return live ? fewer : fewer + " (the cores they left free) or " + own;
}

// The intra-op threads a step runs on: --threads, a launcher's share of the cores, or one per core.
int step_threads(const Options& o) {
  const int cores = static_cast<int>(usable_cores());
  const int t = train::local_threads(o.common.threads, train::read_launch(), cores);
  return t > 0 ? t : cores;
}

report::Record train_record(const train::TrainResult& r) {
  report::Record rec;
  rec.add("schema", "gc-train/1")
      .add("status", r.interrupted ? "interrupted" : "done")
      .add("mode", r.mode)
      .add("objective", r.objective)
      .add("classes", r.classes)
      .add("world_size", r.world_size)
      .add("collectives", r.collectives)
      .add("collective_seconds", r.collective_seconds)
      .add("start_step", r.start_step)
      .add("steps", r.steps_done)
      .add("total_steps", r.total_steps)
      .add("loss", r.last_loss)
      .add("seconds", r.seconds)
      .add("samples_per_second", r.samples_per_second)
      .add("seconds_per_epoch", r.seconds_per_epoch)
      .add("peak_rss_bytes", peak_rss_bytes())
      .add("utf8_replaced", r.utf8_replaced)
      .add("precision", r.precision)
      .add("math_mode", r.math_mode);
  if (r.data_cache) {
    const auto& c = *r.data_cache;
    char text[160];
    std::snprintf(text, sizeof text, "%llu hits, %llu misses, %llu of %llu rows cacheable",
                  static_cast<unsigned long long>(c.hits), static_cast<unsigned long long>(c.misses),
                  static_cast<unsigned long long>(c.slots), static_cast<unsigned long long>(c.rows));
    rec.add("data_cache",
            {{"slabs", c.slabs},
             {"hits", c.hits},
             {"misses", c.misses},
             {"stored", c.stored},
             {"slots", c.slots},
             {"rows", c.rows},
             {"bytes", c.bytes},
             {"window", window_json(r)}},
            text);
  } else {
    rec.add("data_cache", nullptr);
  }
  add_eval(rec, "eval_before", r.eval_before);
  add_eval(rec, "eval_after", r.eval_after);
  if (r.best.step >= 0)
    rec.add("best", {{"metric", r.best.metric}, {"value", r.best.value}, {"step", r.best.step}});
  else
    rec.add("best", nullptr);
  rec.add("stopped_early", r.stopped_early);
  rec.add("checkpoint", r.checkpoint);
  rec.add("threads", r.threads);
  cli::add_contention(rec, r.contention, contention_remedy(r.contention, r.threads));
  rec.note("resume_hint", r.checkpoint.empty() ? " (no --checkpoint-dir: progress lost)"
                                               : "; checkpoint " + r.checkpoint + " (rerun with --resume)");
  return rec;
}

// The typed training configuration (o.t) completed from the options as given.
void resolve_options(Options& o) {
  auto& t = o.t;
  t.files.trust_slab_owner = t.trust_slab_owner;  // shm:NAME inputs too
  t.query = cli::split(o.query, ',');
  t.passage = cli::split(o.passage, ',');
  t.negatives = cli::split(o.negatives, ',');
  if (!o.chunk.empty()) {
    auto parts = cli::split(o.chunk, ',');
    auto qc = parts.empty() ? std::nullopt : cli::parse_int(parts[0]);
    auto pc = parts.size() > 1 ? cli::parse_int(parts[1]) : qc;
    if (parts.size() > 2 || !qc || !pc || *qc <= 0 || *pc <= 0)
      throw Error(Exit::usage, "--chunk-size", "expected C or QC,PC (positive), got '" + o.chunk + "'");
    t.query_chunk = *qc;
    t.passage_chunk = *pc;
  }
  if (!o.eval_rows.empty()) std::tie(t.eval_begin, t.eval_end) = cli::parse_row_range(o.eval_rows, "--eval-rows");
  if (t.eval_end < 0 && !o.eval_rows.empty()) t.eval_end = INT64_MAX;
  if (!o.eval_k.empty()) t.eval_k = train::parse_ks(o.eval_k);
  t.input_scale = cli::parse_fraction(o.input_scale, "--input-scale");
  t.data_cache = data_cache::parse(o.data_cache, "--data-cache");
  t.data_cache.keep = o.data_cache_keep;
  if (!o.data_cache_limit.empty()) t.data_cache.limit_bytes = slab::parse_size(o.data_cache_limit);
  if (!o.data_cache_limit.empty() && t.data_cache.limit_bytes == 0)
    throw Error(Exit::usage, "--data-cache-limit", "must be a positive size");
  for (const auto& spec : o.tokenizers) {
    auto [side, path] = cli::split_assignment(spec);
    if (side && *side != "query" && *side != "passage")
      throw Error(Exit::usage, "--tokenizer", "expected FILE, query=FILE or passage=FILE, got '" + spec + "'");
    (!side ? t.tokenizer : *side == "query" ? t.query_tokenizer : t.passage_tokenizer) = path;
  }
  for (const auto& spec : o.cache_devices) {
    auto [name, dev] = cli::split_assignment(spec);
    if (name)
      t.cache_devices[*name] = dev;
    else
      t.cache_device = dev;
  }
  t.gradcache = !o.no_gradcache;
  t.shuffle = !o.no_shuffle;
  t.drop_last = !o.no_drop_last;
  t.threads = o.common.threads;
  t.device = o.common.device;
}

// The training's callbacks: progress bars (made on first use in `bar` and `eval_bar`) and
// messages on stderr.
// While other processes hold the cores (`live`'s last window), the bar says so and what to try.
train::TrainCallbacks callbacks(const Options& o, std::unique_ptr<Progress>& bar, std::unique_ptr<Progress>& eval_bar,
                                const CpuContentionWatch& live) {
  train::TrainCallbacks cb;
  cb.progress = [&o, &bar, &live, threads = step_threads(o)](int64_t step, int64_t total, double loss) {
    if (!bar) bar = std::make_unique<Progress>("training", total, o.common.progress_mode(), "steps");
    char extra[80];
    std::snprintf(extra, sizeof extra, "loss %.4f  %s samples/s", loss,
                  rate_text(bar->rate() * static_cast<double>(o.t.batch_size)).c_str());
    const CpuContention recent = live.recent();
    const std::string slowed = slowed_note(recent, contention_remedy(recent, threads, true));
    bar->update(step, slowed.empty() ? std::string(extra) : extra + ("  " + slowed));
  };
  cb.eval_progress = [&o, &eval_bar](int64_t done, int64_t total) {
    if (!eval_bar) eval_bar = std::make_unique<Progress>("evaluating", total, o.common.progress_mode(), "rows");
    eval_bar->update(done);
    if (done >= total) eval_bar.reset();  // the line ends; a training bar goes on below it
  };
  cb.evaluated_before = [&o](const train::EvalMetrics& m) {
    // With --json the metrics are in the JSON document only, as the after-training ones.
    if (!o.common.quiet && !o.common.json)
      std::fprintf(stderr, "%s: before training: %s\n", kTool, eval_text(m).c_str());
  };
  cb.info = [&o](const std::string& m) {
    if (!o.common.quiet) std::fprintf(stderr, "%s: %s\n", kTool, m.c_str());
  };
  cb.warn = [&o](const std::string& m) {
    if (!o.common.quiet) cli::print_warning(kTool, m);
  };
  cb.evaluated = [&o](int64_t step, const train::EvalMetrics& m, bool best) {
    if (o.common.quiet) return;
    std::fprintf(stderr, "%s: step %lld: %s%s\n", kTool, static_cast<long long>(step), eval_text(m).c_str(),
                 best ? " (best so far)" : "");
  };
  return cb;
}

int run(Options& o) {
  resolve_options(o);
  const char* rank = std::getenv("RANK");  // under torchrun every rank gets the signal: one notice
  install_interrupt_handlers(rank && std::string(rank) != "0"
                                 ? ""
                                 : std::string(kTool) +
                                       ": interrupted: stopping after this step (a checkpoint is saved with "
                                       "--checkpoint-dir); interrupt again to stop at once");
  std::unique_ptr<Progress> bar, eval_bar;
  CpuContentionWatch live;  // for the progress line; the run's own watch gives the closing note
  auto r = train::run_train_in_module(o.t, callbacks(o, bar, eval_bar, live));
  if (bar) bar->finish();
  if (r.rank > 0) return r.interrupted ? cli::code(Exit::interrupted) : 0;  // rank 0 reports for all
  auto rec = train_record(r);
  if (r.interrupted) {
    if (o.common.json) report::print_json(rec.json());
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", kTool, rec.format("interrupted at step {steps}{resume_hint}").c_str());
    return cli::code(Exit::interrupted);
  }
  // A resume at the last step trains nothing: no rate to report ("0 samples/s" read as a stall).
  const bool nothing_left = r.start_step > 0 && r.start_step >= r.steps_done;
  cli::print_result(
      kTool, o.common, rec,
      {r.eval_after.present ? "after training:  {eval_after}" : "",
       nothing_left ? "{mode}: nothing left to do: the checkpoint is at step {steps}, the last"
                    : "{mode}: {steps} steps, loss {loss:%.6g}, {seconds:%.2f} s, {samples_per_second:%.0f} "
                      "samples/s, {seconds_per_epoch:%.2f} s per epoch",
       r.contention.competed() ? "{contention}" : ""});
  return 0;
}

// Where the training data comes from: raw inputs and their encoders, or cached embeddings.
void add_input_options(CLI::App& app, Options& o) {
  auto& t = o.t;
  auto* g_raw = "Raw inputs";
  app.add_option("--data", t.data,
                 "HDF5 file, .npz archive, .csv/.tsv/.jsonl manifest (image paths or texts) or WebDataset tar shards "
                 "(fields jpg, txt, ...) with aligned query/passage columns")
      ->group(g_raw);
  app.add_option("--query", o.query, "Query dataset(s), or a manifest's path or text field, comma-separated")
      ->group(g_raw);
  app.add_option("--passage", o.passage, "Passage dataset(s), or a manifest's path or text field, comma-separated")
      ->group(g_raw);
  app.add_option("--negatives", o.negatives,
                 "Hard-negative dataset(s) [rows, k, ...], a manifest path field (one each), or a text field of "
                 "strings or JSON lists of k strings")
      ->group(g_raw);
  app.add_option("--labels", t.labels,
                 "Label dataset or manifest field: train the --query side grouped by label (no --passage); "
                 "with --cache, the cache's label column of that name (default: its first)")
      ->group(g_raw);
  app.add_option("--encoder", t.encoder, "TorchScript encoder for both sides (tied)")->group(g_raw);
  app.add_option("--query-encoder", t.query_encoder, "TorchScript query encoder (separate)")->group(g_raw);
  app.add_option("--passage-encoder", t.passage_encoder, "TorchScript passage encoder (separate)")->group(g_raw);
  app.add_option("--input-scale", o.input_scale, "Scale for uint8 inputs")->capture_default_str()->group(g_raw);
  app.add_flag("--stream", t.stream,
               "Read each batch's rows from --data (or --cache) instead of loading the datasets whole (automatic "
               "when the raw inputs loaded whole would take over 80% of the available memory)")
      ->group(g_raw);
  app.add_option("--data-cache", o.data_cache,
                 "none, full, stochastic:F or smart:N,r: keep the converted rows of streamed inputs (all, the "
                 "first fraction F, or a SmartCache window of N rows of which ceil(N*r) are replaced per epoch) in "
                 "shared-memory slabs every process on the machine uses (implies --stream)")
      ->capture_default_str()
      ->group(g_raw);
  app.add_option("--data-cache-limit", o.data_cache_limit,
                 "stochastic: cache as many rows as fit in SIZE bytes (K/M/G suffixes) instead of a fraction")
      ->group(g_raw);
  app.add_option("--data-cache-keep", o.data_cache_keep,
                 "Keep the data cache's slabs as NAME-0, NAME-1, ... after the run (and use them if they exist)")
      ->group(g_raw);
  cli::add_file_options(app, t.files, g_raw, true);
  auto* g_text = "Text";
  app.add_option("--tokenizer", o.tokenizers,
                 "[query=|passage=]FILE: the fields of both sides (or one) are texts, tokenized with this "
                 "tokenizer.json or SentencePiece .model")
      ->group(g_text);
  cli::add_tokenize_options(app, t.tokenize, g_text);
  auto* g_cache = "Cached embeddings";
  app.add_option("--cache", t.cache, "Cache file from cache-fill")->group(g_cache);
  app.add_option("--embeddings", t.embeddings, "Grouped mode: the encoder whose embeddings are grouped by label")
      ->group(g_cache);
  app.add_option("--query-embeddings", t.query_embeddings, "Aligned mode: the query side's encoder")->group(g_cache);
  app.add_option("--passage-embeddings", t.passage_embeddings, "Aligned mode: the passage side's encoder")
      ->group(g_cache);
  app.add_option("--head", t.head, "mlp:H1,...,Hn, linear:D, or a TorchScript file")
      ->capture_default_str()
      ->group(g_cache);
  app.add_option("--cache-shm", t.cache_shm,
                 "Share the embeddings with every process on this machine through slabs NAME-<encoder>")
      ->group(g_cache);
  app.add_flag("--trust-slab-owner", t.trust_slab_owner,
               "Use --cache-shm, --data-cache and shm:NAME input slabs made by another user (refused otherwise)")
      ->group(g_cache);
  app.add_option("--cache-device", o.cache_devices, "[NAME=]cpu|cuda:N: where (one encoder's) cached embeddings live")
      ->group(g_cache);
}

// The loss, batches and steps.
void add_batch_options(CLI::App& app, Options& o) {
  auto& t = o.t;
  auto* g_loss = "Loss and batches";
  cli::add_choice(app, "--loss", t.loss, train::objective_choices(),
                  "infonce (pairs); supcon, softmax, arcface, cosface or triplet (labelled rows); default: infonce for "
                  "pairs, supcon for labelled rows")
      ->default_str("")
      ->group(g_loss);
  app.add_option("--margin", t.margin, "arcface (radians; 0.5), cosface (0.35) or triplet (0.2) margin")
      ->check(cli::positive_number(true))
      ->group(g_loss);
  app.add_option("--scale", t.scale, "arcface and cosface logit scale (64)")
      ->check(cli::positive_number())
      ->group(g_loss);
  cli::add_choice(app, "--mining", t.mining, train::mining_choices(), "triplet mining: batch-hard or semi-hard")
      ->default_str("batch-hard")
      ->group(g_loss);
  cli::add_choice(app, "--similarity", t.similarity, similarity_choices(), "cos or dot")->group(g_loss);
  app.add_option("--temperature", t.temperature, "Logit temperature")
      ->check(cli::positive_number())
      ->capture_default_str()
      ->group(g_loss);
  app.add_flag("--symmetric", t.symmetric, "Also score positives against all queries")->group(g_loss);
  app.add_option("-b,--batch-size", t.batch_size, "Rows per step (global batch)")
      ->check(cli::positive_integer())
      ->capture_default_str()
      ->group(g_loss);
  app.add_option("-c,--chunk-size", o.chunk, "Rows per encoder chunk: C, or QC,PC per side (default 16)")
      ->group(g_loss);
  app.add_option("--max-tokens", t.max_tokens,
                 "Text sides: token slots per chunk at most (rows x its longest text), the batch's texts taken "
                 "shortest first; 0: --chunk-size rows only (default " +
                     std::to_string(text::kDefaultMaxTokensCpu) + " on a CPU, " +
                     std::to_string(text::kDefaultMaxTokensCuda) + " on CUDA)")
      ->check(cli::integer_range(0, INT64_MAX))
      ->group(g_loss);
  app.add_option("--loss-chunk", t.loss_chunk,
                 "Anchor rows per loss chunk (default: the query chunk; CUDA: 2^25 logits)")
      ->check(cli::positive_integer())
      ->group(g_loss);
  app.add_flag("--no-gradcache", o.no_gradcache, "Plain full-batch step (reference and baseline)")->group(g_loss);
  app.add_flag("--no-drop-last", o.no_drop_last, "Keep the last partial batch of an epoch")->group(g_loss);
  app.add_flag("--no-shuffle", o.no_shuffle, "Batches are rows [bB, (b+1)B) in order")->group(g_loss);
  app.add_option("--seed", t.seed, "Seed of initialisation, shuffling and dropout")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            // CLI11 saturates a number past uint64 at its largest value: two such seeds were one.
            errno = 0;
            char* end = nullptr;
            std::strtoull(v.c_str(), &end, 10);
            const bool ok = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos && errno != ERANGE;
            return ok ? "" : "must be an integer from 0 to 18446744073709551615, got '" + v + "'";
          },
          "UINT64"))
      ->capture_default_str()
      ->group(g_loss);
  app.add_option("--steps", t.steps, "Steps to train (overrides --epochs)")
      ->check(cli::positive_integer())
      ->group(g_loss);
  app.add_option("--epochs", t.epochs, "Epochs to train")
      ->check(cli::positive_integer())
      ->capture_default_str()
      ->group(g_loss);
  cli::add_choice(app, "--dtype", t.dtype, train::float_dtype_choices(), "float32 or float64")->group(g_loss);
  cli::add_choice(app, "--precision", t.precision, model::training_precision_choices(),
                  "fp32, bf16 (autocast; CPU or CUDA) or fp16 (autocast with loss scaling; CUDA)")
      ->group(g_loss);
  cli::add_tf32_option(app, &t.tf32)->group(g_loss);
}

// What is held out and how it is scored (docs/gc-train.md, "Evaluation").
void add_eval_options(CLI::App& app, Options& o) {
  auto& t = o.t;
  auto* g = "Evaluation";
  app.add_option("--eval-rows", o.eval_rows, "Held-out rows A:B, excluded from training, evaluated before and after")
      ->group(g);
  app.add_option("--eval-split", t.eval_split, "Hold out this fraction of the rows, chosen at random by --seed")
      ->group(g);
  app.add_flag("--stratify", t.stratify, "--eval-split holds out that fraction of every label (grouped mode)")
      ->group(g);
  app.add_option("--eval-data", t.eval_data,
                 "Evaluate on this file instead (same datasets, or a cache with the same encoders)")
      ->group(g);
  app.add_option("--eval-k", o.eval_k, "Cut-offs of the @k metrics, comma-separated (default 1,5,10)")->group(g);
  app.add_option("--eval-bootstrap", t.eval_bootstrap, "Resamples of the queries for 95% intervals (0: none)")
      ->check(cli::integer_range(0, INT64_MAX))
      ->group(g);
  app.add_option("--eval-dump", t.eval_dump, "Per-query results of every evaluation as TSV")->group(g);
  app.add_option("--eval-every", t.eval_every, "Also evaluate every N steps (0: before and after only)")
      ->check(cli::integer_range(0, INT64_MAX))
      ->group(g);
  app.add_option("--select-best", t.select_best,
                 "Keep --out (and DIR/best.pt) at the best value of this metric, e.g. map_at_r")
      ->group(g);
  app.add_option("--early-stop", t.early_stop, "Stop after N evaluations without a new best (0: never)")
      ->check(cli::integer_range(0, INT64_MAX))
      ->group(g);
}

// The optimiser, data parallelism, checkpoints and outputs.
void add_optimiser_options(CLI::App& app, Options& o) {
  auto& t = o.t;
  auto* g_opt = "Optimiser";
  cli::add_choice(app, "--optimizer", t.optimizer, train::optimizer_choices(), "sgd or adamw")->group(g_opt);
  app.add_option("--lr", t.lr, "Peak learning rate")
      ->check(cli::positive_number())
      ->capture_default_str()
      ->group(g_opt);
  app.add_option("--momentum", t.momentum, "SGD momentum")
      ->check(cli::positive_number(true))
      ->capture_default_str()
      ->group(g_opt);
  app.add_option("--weight-decay", t.weight_decay, "Weight decay")
      ->check(cli::positive_number(true))
      ->capture_default_str()
      ->group(g_opt);
  app.add_option("--warmup-steps", t.warmup_steps, "Linear warmup steps")
      ->check(cli::integer_range(0, INT64_MAX))
      ->capture_default_str()
      ->group(g_opt);
  cli::add_choice(app, "--schedule", t.schedule, train::schedule_choices(),
                  "constant, linear or cosine decay after warmup")
      ->group(g_opt);
  app.add_option("--clip-norm", t.clip_norm, "Clip the gradient norm (0: off)")
      ->check(cli::positive_number(true))
      ->capture_default_str()
      ->group(g_opt);
  auto* g_dist = "Data parallel (with WORLD_SIZE > 1; see docs/distributed.md)";
  cli::add_choice(app, "--dist-backend", t.dist_backend, train::backend_choices(),
                  "auto (nccl for CUDA, gloo otherwise), gloo or nccl")
      ->group(g_dist);
  app.add_option("--dist-timeout", t.dist_timeout, "Seconds a rank waits for the others before failing")
      ->check(cli::positive_number())
      ->capture_default_str()
      ->group(g_dist);
  auto* g_out = "Checkpoints and outputs";
  app.add_option("--checkpoint-dir", t.checkpoint_dir, "Directory of checkpoint.pt")->group(g_out);
  app.add_option("--checkpoint-every", t.checkpoint_every, "Steps between checkpoints (0: only at the end)")
      ->check(cli::integer_range(0, INT64_MAX))
      ->group(g_out);
  app.add_flag("--resume", t.resume, "Continue from the checkpoint in --checkpoint-dir")->group(g_out);
  app.add_option("-o,--out", t.out, "Trained encoder or head as TorchScript")->group(g_out);
  app.add_option("--passage-out", t.passage_out, "Trained passage encoder (separate encoders)")->group(g_out);
  app.add_option("--classifier-out", t.classifier_out,
                 "Trained classifier (softmax, arcface, cosface) as TorchScript: representation -> class logits")
      ->group(g_out);
  app.add_option("--metrics", t.metrics, "Per-step metrics as JSON Lines")->group(g_out);
  app.add_option("--batch-log", t.batch_log, "Each step's rows (of --data) as JSON Lines")->group(g_out);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Gradient-cached contrastive training on cached embeddings or raw inputs.", kTool};
  Options o;
  cli::add_common_options(app, o.common, cli::Compute::full, model::runtime_info_in_module);
  add_input_options(app, o);
  add_batch_options(app, o);
  add_optimiser_options(app, o);
  add_eval_options(app, o);
  app.footer(
      "EXAMPLES\n"
      "  gc-train --cache cache.h5 --embeddings cnn --head mlp:256,128 -b 4096 -c 512 --epochs 10 \\\n"
      "           --eval-split 0.1 --out head.pt\n"
      "  gc-train --data pairs.jsonl --query query --passage passage --tokenizer tokenizer.json \\\n"
      "           --max-length 128 --encoder text.pt -b 1024 -c 32 --epochs 1 --out tuned.pt\n"
      "  gc-train --data pairs.h5 --query q --passage p --encoder tower.pt -b 512 -c 64 \\\n"
      "           --steps 1000 --checkpoint-dir ck --resume --out tuned.pt\n\n"
      "EXIT STATUS\n  0 done; 64 usage (bad option, batch larger than the data); 65 bad data (rows or widths\n"
      "  mismatch, BatchNorm with gradient caching, NaN loss, unreadable checkpoint); 66 input missing;\n"
      "  69 CUDA, NCCL or LibTorch's module (libtraincache_engines.so) unavailable, or another rank\n"
      "  failed, hung or was unreachable (data parallel);\n"
      "  70 internal; 73/74 output or I/O error; 75 another run holds --checkpoint-dir, or a\n"
      "  --cache-shm slab is still being filled by another process;\n"
      "  130 interrupted (checkpoint saved).\n"
      "See docs/gc-train.md.");
  return cli::end_process(cli::run_tool(kTool, app, argc, argv, [&] {
    cli::refuse_repeated(app, {"--cache", "--data", "--eval-data", "--cache-shm"});
    return run(o);
  }));
}
