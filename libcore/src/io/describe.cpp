#include "traincache/io/describe.h"

#include <cstdio>
#include <ctime>

#include "traincache/base/format.h"

namespace traincache::io::describe {

namespace {

// What an embedding's rows were encoded in, where not float32: ", bf16", ", int8 (weights of 64
// steps)" (127 in int8 caches from before the range was recorded); "" for float32.
std::string precision_text(const cache::EmbeddingInfo& e) {
  const std::string p = cache::precision_of(e);
  if (p == "fp32") return "";
  if (p != "int8") return ", " + p;
  return ", int8 (weights of " + std::to_string(int8_weight_max(e)) + " steps)";
}

// The text inputs: one line each (a field and its tokenizer, or ragged token sequences).
void add_text(report::Record& r, const cache::CacheInfo& c) {
  report::Json text = report::Json::array();
  std::string lines;
  for (const auto& t : c.text) {
    text.push_back({{"key", t.key},
                    {"field", t.field},
                    {"ragged", t.ragged},
                    {"tokenizer_path", t.tokenizer_path},
                    {"tokenizer_sha256", t.tokenizer_sha256},
                    {"tokenizer_kind", t.tokenizer_kind},
                    {"max_length", t.max_length},
                    {"padding", t.padding},
                    {"strict_utf8", t.strict_utf8},
                    {"pad_id", t.pad_id}});
    lines += "  text         " + t.field + ": " +
             (t.ragged ? "token sequences as stored, pad id " + std::to_string(t.pad_id)
                       : t.tokenizer_kind + " " + t.tokenizer_path + " (sha256 " + t.tokenizer_sha256.substr(0, 12) +
                             "), max length " + std::to_string(t.max_length) + ", padding " + t.padding +
                             (t.strict_utf8 ? ", strict UTF-8" : "")) +
             (c.length_window > 0 ? ", length window " + std::to_string(c.length_window) : "") + "\n";
  }
  r.add("text", c.text.empty() ? report::Json(nullptr) : text, lines);
  r.add("length_window", c.length_window);
}

std::string layout_text(const slab::SlabInfo& i) {
  if (i.layout == slab::Layout::fixed) return std::string("fixed ") + shape_text(i.dims) + " " + dtype_name(i.dtype);
  return std::string("variable ") + dtype_name(i.dtype);
}

std::string age_text(int64_t created) {
  int64_t s = static_cast<int64_t>(std::time(nullptr)) - created;
  char buf[32];
  if (s < 120)
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  else if (s < 7200)
    std::snprintf(buf, sizeof buf, "%lldm", static_cast<long long>(s / 60));
  else if (s < 172800)
    std::snprintf(buf, sizeof buf, "%lldh", static_cast<long long>(s / 3600));
  else
    std::snprintf(buf, sizeof buf, "%lldd", static_cast<long long>(s / 86400));
  return buf;
}

// One label column: its JSON record and its line (dtype, source and, for integer labels, each
// class's count and name).
std::pair<report::Json, std::string> label_record(const cache::LabelInfo& l) {
  report::Json counts = report::Json::object();
  std::string t = std::string(dtype_name(l.dtype)) + " from '" + l.source + "'";
  // More classes than a line can list (a column of sizes or ids): their number and range.
  constexpr std::size_t kListed = 32;
  if (l.counts.size() > kListed)
    t += ", " + std::to_string(l.counts.size()) + " values from " + std::to_string(l.counts.begin()->first) + " to " +
         std::to_string(l.counts.rbegin()->first);
  else if (!l.counts.empty())
    t += ", " + std::to_string(l.counts.size()) + " classes:";
  for (auto [k, n] : l.counts) {
    counts[std::to_string(k)] = n;
    const bool named = k >= 0 && static_cast<std::size_t>(k) < l.names.size();
    if (l.counts.size() <= kListed)
      t +=
          " " + std::to_string(k) + (named ? "=" + l.names[static_cast<std::size_t>(k)] : "") + ":" + std::to_string(n);
  }
  report::Json j = {{"name", l.name},     {"dataset", l.dataset},
                    {"source", l.source}, {"dtype", dtype_name(l.dtype)},
                    {"rows", l.rows},     {"classes", l.counts.size()},
                    {"counts", counts},   {"names", l.names.empty() ? report::Json(nullptr) : report::Json(l.names)}};
  return {j, t};
}

// The label columns: `labels` the first (as caches with one had it), `label_columns` every one;
// in text one line each, named when there are several.
void add_labels(report::Record& r, const cache::CacheInfo& c) {
  const auto all = cache::label_columns(c);
  if (all.empty()) {
    r.add("labels", nullptr, "none");
    r.add("label_columns", report::Json::array(), "");
    return;
  }
  report::Json list = report::Json::array();
  std::string text;
  for (const cache::LabelInfo* l : all) {
    auto [j, t] = label_record(*l);
    list.push_back(j);
    if (all.size() > 1) t = (text.empty() ? "" : "\n               ") + l->name + ": " + t;
    text += t;
  }
  r.add("labels", list.front(), text);
  r.add("label_columns", list, "");
}

// The fills and updates that made the cache, oldest first (cache-fill --update), and whether it
// holds the row digests an update needs.
void add_history(report::Record& r, const cache::CacheInfo& c) {
  std::string text;
  for (std::size_t i = 0; i < c.history.size(); ++i) {
    const cache::HistoryEntry& h = c.history[i];
    text += (i ? "\n               " : "") + std::to_string(i + 1) + ". " + h.run +
            (h.shard >= 0 ? " of shard " + std::to_string(h.shard) : "") + ": " + std::to_string(h.rows) + " rows, ";
    if (h.run == "merge") {
      text += "from " + std::to_string(h.shards) + " shards";
      continue;
    }
    text += std::to_string(h.encoded) + " encoded";
    if (const auto& u = h.update)
      text += ", " + std::to_string(u->copied) + " copied (by " + u->matched_by + ": added " +
              std::to_string(u->added) + ", changed " + std::to_string(u->changed) + ", removed " +
              std::to_string(u->removed) + ", unchanged " + std::to_string(u->unchanged) +
              (u->moved ? ", moved " + std::to_string(u->moved) : "") +
              (u->copies ? ", copies " + std::to_string(u->copies) : "") + ")";
  }
  if (c.history.empty()) text = "not recorded (made before cache-fill kept it)";
  if (!c.row_digests) text += "; no row digests (cache-fill --update needs a full fill first)";
  r.add("history", report::Json::parse(cache::history_text(c.history)), text);
  r.add("row_digests", c.row_digests);
  r.add("row_file_digests", c.row_file_digests);
}

}  // namespace

report::Record cache_record(const cache::CacheInfo& c) {
  report::Record r;
  std::string features;
  for (const auto& f : c.features) features += (features.empty() ? "" : ",") + f;
  r.add("path", c.path)
      .add("format", cache::kFormatName)
      .add("format_version", c.format_version)
      .add("complete", c.complete, c.complete ? "complete" : "INCOMPLETE")
      .add("rows", c.rows)
      .add("row_start", c.row_start)
      .add("created_by", c.created_by)
      .add("input_path", c.input_path)
      .add("input_kind", c.input_kind.empty() ? nullptr : report::Json(c.input_kind),
           c.input_kind.empty() ? "unrecorded" : c.input_kind)
      .add("features", c.features, features)
      .add("input_scale", c.input_scale)
      .add("fingerprint", c.fingerprint);
  report::Json pre = report::Json::object();
  std::string pre_text;
  for (const auto& [k, v] : c.preprocess) {
    pre[k] = v;
    pre_text += (pre_text.empty() ? "" : ", ") + k + " " + v;
  }
  r.add("preprocess", c.preprocess.empty() ? nullptr : pre, c.preprocess.empty() ? "none (no images)" : pre_text);
  r.note("row_end", std::to_string(c.row_start + c.rows));
  // --input-scale applies to uint8 arrays; images are scaled by ToTensor's 1/255 instead.
  char scale[64];
  std::snprintf(scale, sizeof scale, "uint8 scale %g", c.input_scale);
  r.note("scale", !c.preprocess.empty() ? "images scaled to [0,1]" : c.features.empty() ? "no numeric inputs" : scale);
  add_text(r, c);
  report::Json embeddings = report::Json::array();
  std::string text;
  char line[1024];
  for (const auto& e : c.embeddings) {
    embeddings.push_back({{"name", e.name},
                          {"shape", e.shape},
                          {"dtype", dtype_name(e.dtype)},
                          {"bytes", e.bytes},
                          {"encoder_path", e.encoder_path},
                          {"encoder_sha256", e.encoder_sha256},
                          {"features", e.features},
                          {"text", e.text},
                          {"output", e.output},
                          {"inference", e.inference},
                          {"math_mode", e.math_mode},
                          {"precision", cache::precision_of(e)}});
    if (e.precision == "int8") embeddings.back()["int8_weight_max"] = int8_weight_max(e);
    std::snprintf(line, sizeof line, "  embeddings/%s  %s %s %s, %s%s, from %s (sha256 %.12s)\n", e.name.c_str(),
                  shape_text(e.shape).c_str(), dtype_name(e.dtype), format_size(e.bytes).c_str(), e.inference.c_str(),
                  precision_text(e).c_str(), e.encoder_path.c_str(), e.encoder_sha256.c_str());
    text += line;
  }
  r.add("embeddings", embeddings, text);
  add_labels(r, c);
  if (c.keys_dtype)
    r.add("keys", {{"source", *c.keys_source}, {"dtype", dtype_name(*c.keys_dtype)}},
          std::string(dtype_name(*c.keys_dtype)) + " from '" + *c.keys_source + "'");
  else
    r.add("keys", nullptr, "none (key = input row number)");
  r.add("skipped", c.skipped,
        c.skipped
            ? std::to_string(c.skipped) + " rows whose image could not be read (zeros; /skipped/rows, /skipped/reasons)"
            : "none");
  add_history(r, c);
  return r;
}

report::Record stats_record(const cache::EmbeddingStats& s) {
  report::Record r;
  r.add("name", s.name)
      .add("rows", s.rows)
      .add("norm_mean", s.norm_mean)
      .add("norm_std", s.norm_std)
      .add("norm_min", s.norm_min)
      .add("norm_max", s.norm_max)
      .add("nan_count", s.nan_count)
      .add("inf_count", s.inf_count);
  return r;
}

report::Json cache_json(const std::string& path, bool stats) {
  report::Json j = cache_record(cache::read_info(path)).json();
  if (stats) {
    j["stats"] = report::Json::array();
    for (const auto& st : cache::compute_stats(path)) j["stats"].push_back(stats_record(st).json());
  }
  return j;
}

report::Record slab_record(const slab::SlabInfo& i, const slab::SlotCounts* c) {
  const bool fixed = i.layout == slab::Layout::fixed, first = i.selection == slab::Selection::first;
  char mode[16];
  std::snprintf(mode, sizeof mode, "%04o", i.mode);
  report::Record r;
  r.add("name", i.name)
      .add("path", i.path)
      .add("layout", fixed ? "fixed" : "variable", layout_text(i))
      .add("dtype", dtype_name(i.dtype))
      .add("dims", i.dims)
      .add("length", i.length)
      .add("slots", i.slots)
      .add("selection", slab::selection_choices().name(i.selection), first ? "first-N" : "hashed")
      .add("item_bytes", i.item_bytes)
      .add("arena_bytes", i.arena_bytes, format_size(i.arena_bytes))
      .add("arena_used_bytes", i.arena_used, format_size(i.arena_used))
      .add("total_bytes", i.total_bytes, format_size(i.total_bytes))
      .add("offsets",
           {{"map", i.map_offset}, {"states", i.states_offset}, {"index", i.index_offset}, {"data", i.data_offset}})
      .add("mode", i.mode, mode)
      .add("uid", i.uid)
      .add("creator", i.creator)
      .add("creator_pid", i.creator_pid)
      .add("temporary", i.temporary, i.temporary ? ", temporary" : "")
      .add("content_id", i.content_id)
      .add("sealed", i.sealed_digest.has_value())
      .add("created_unix", i.created_unix, age_text(i.created_unix));
  r.note("arena", fixed ? "" : " (arena " + format_size(i.arena_bytes) + ", " + format_size(i.arena_used) + " used)");
  if (c) {
    double fraction = i.slots ? double(c->filled) / i.slots : 0.0;
    std::string text = std::to_string(c->filled) + " filled, " + std::to_string(c->writing) + " writing, " +
                       std::to_string(c->empty) + " empty";
    if (c->invalid) text += ", " + std::to_string(c->invalid) + " invalid (corrupt; repair resets them)";
    r.add("counts",
          {{"empty", c->empty},
           {"writing", c->writing},
           {"filled", c->filled},
           {"invalid", c->invalid},
           {"filled_bytes", c->filled_bytes},
           {"filled_fraction", fraction}},
          text + "; " + format_size(c->filled_bytes) + " of data");
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.1f%%", 100 * fraction);
    r.note("filled_percent", pct);
  }
  return r;
}

}  // namespace traincache::io::describe
