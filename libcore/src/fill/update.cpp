#include "update.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <future>
#include <numeric>

#include "traincache/base/dtype.h"
#include "traincache/base/error.h"
#include "traincache/fill/fill.h"

using nlohmann::json;

namespace traincache::fill {

std::vector<Digest128> row_digests(const Inputs& in, int64_t a, int64_t b, int threads) {
  std::vector<Digest128> out(static_cast<std::size_t>(b - a));
  // Rows [s, e) on one thread: reading the files (image folders, manifests) is most of the work.
  auto part = [&](int64_t s, int64_t e) {
    std::vector<ContentHash> hashes(static_cast<std::size_t>(e - s));
    for (const auto& [name, d] : in.features) d.col->feed_rows(s, e, hashes.data());
    for (const auto& [key, t] : in.texts) t.col->feed_rows(s, e, hashes.data());
    for (std::size_t i = 0; i < hashes.size(); ++i) out[static_cast<std::size_t>(s - a) + i] = hashes[i].digest();
  };
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(threads, (b - a) / 1024));
  std::vector<std::future<void>> parts;
  for (int64_t k = 1; k < n; ++k)
    parts.push_back(std::async(std::launch::async, part, a + (b - a) * k / n, a + (b - a) * (k + 1) / n));
  std::exception_ptr failed;
  try {
    part(a, a + (b - a) / n);
  } catch (...) {
    failed = std::current_exception();
  }
  for (auto& p : parts) try {
      p.get();
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  if (failed) std::rethrow_exception(failed);
  return out;
}

json row_digest_inputs(const Inputs& in) {
  json j = json::array();
  for (const auto& [name, d] : in.features) j.push_back("features/" + name);
  for (const auto& [key, t] : in.texts) j.push_back("text/" + key);
  return j;
}

std::vector<std::string> key_bytes(const io::source::Column& col, int64_t a, int64_t b) {
  constexpr int64_t kBlock = 65536;
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(b - a));
  const std::size_t row = col.info().row_bytes();
  std::vector<char> buf;
  for (int64_t s = a; s < b; s += kBlock) {
    const int64_t n = std::min(kBlock, b - s);
    if (col.info().dtype == DType::string) {
      for (auto& k : col.read_strings(s, n)) out.push_back(std::move(k));
      continue;
    }
    buf.resize(static_cast<std::size_t>(n) * row);
    col.read(s, n, buf.data());
    for (int64_t r = 0; r < n; ++r) out.emplace_back(buf.data() + r * row, row);
  }
  return out;
}

std::string batch_dependence(const std::string& encoder, double abs_diff, double rel_diff) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "encoder '%s': a row's output depends on the rows batched with it (alone and in the first batch "
                "it differs by up to %.3g, %.3g%% of the batch's largest value: batch statistics, or pooling over "
                "the padding?)",
                encoder.c_str(), abs_diff, 100 * rel_diff);
  return buf;
}

void refuse_batch_dependent(const io::cache::CacheInfo& old) {
  constexpr int64_t kScaleRows = 256;
  for (const auto& e : old.embeddings) {
    double rel = e.batch_max_rel_diff;
    if (rel < 0 && e.batch_max_abs_diff > 0) {  // recorded before the share was: of the first rows' values
      std::vector<int64_t> rows(static_cast<std::size_t>(std::min(kScaleRows, old.rows)));
      std::iota(rows.begin(), rows.end(), 0);
      double largest = 0;
      for (const float v : io::cache::read_embedding_rows(old.path, e.name, rows))
        largest = std::max(largest, std::fabs(static_cast<double>(v)));
      rel = largest > 0 ? e.batch_max_abs_diff / largest : 1;
    }
    if (rel > batch_dependent_share(e.precision_max_rel_diff))
      throw Error(Exit::cant_create, old.path,
                  batch_dependence(e.name, e.batch_max_abs_diff, rel) +
                      ", so an update's rows would not be a full fill's; use --force to encode every row");
  }
}

Update::Update(const io::cache::CacheInfo& old, RowIdentity now) : old_(old) {
  RowIdentity was;
  was.digests = io::cache::read_row_digests(old.path);
  was.files = io::cache::read_row_file_digests(old.path);
  if (old.keys_source && !now.keys.empty()) {
    const auto keys = io::source::open_column(old.path, "keys");
    if (keys->info().rows() != old.rows)
      throw Error(Exit::data, old.path,
                  "/keys holds " + std::to_string(keys->info().rows()) + " rows for the cache's " +
                      std::to_string(old.rows) + ": the cache is damaged; use --force to fill it again");
    was.keys = key_bytes(*keys, 0, old.rows);
  } else {
    now.keys.clear();  // one side without keys: both by position
  }
  std::vector<int64_t> skipped;
  for (const auto& [row, why] : io::cache::read_skipped(old.path)) skipped.push_back(row);
  plan_ = match_rows(was, skipped, now);
  if (plan_.by_key) {
    old_keys_ = std::move(was.keys);
    new_keys_ = std::move(now.keys);
  }
  rows_to_encode_ = fill::rows_to_encode(plan_);
  for (const auto& e : old.embeddings) embeddings_[e.name] = io::source::open_column(old.path, "embeddings/" + e.name);
}

std::map<std::string, JournalEncoder> Update::encoders() const {
  std::map<std::string, JournalEncoder> out;
  for (const auto& e : old_.embeddings) {
    JournalEncoder& je = out[e.name];
    je.has_shape = true;
    je.row_shape.assign(e.shape.begin() + 1, e.shape.end());
    je.inference = e.inference;
    je.optimize_max_abs_diff = e.optimize_max_abs_diff;
    je.precision_max_rel_diff = e.precision_max_rel_diff;
    je.batch_max_abs_diff = e.batch_max_abs_diff;
    je.batch_max_rel_diff = e.batch_max_rel_diff;
  }
  return out;
}

std::string key_text(const std::string& bytes, DType dtype, bool& numeric) {
  numeric = is_integer(dtype) && bytes.size() >= dtype_size(dtype);
  if (!numeric) return bytes;
  int64_t value = 0;
  to_int64(dtype, bytes.data(), &value, 1);
  return std::to_string(value);
}

std::vector<FillResult::RowChange> Update::changes(DType key_dtype) const {
  std::vector<FillResult::RowChange> out;
  auto key = [&](FillResult::RowChange& c, const std::vector<std::string>& keys, int64_t row) {
    if (row < 0 || row >= static_cast<int64_t>(keys.size())) return;
    c.key = key_text(keys[static_cast<std::size_t>(row)], key_dtype, c.numeric_key);
    c.has_key = true;
  };
  for (std::size_t i = 0; i < plan_.fate.size(); ++i) {
    const RowFate fate = plan_.fate[i];
    if (fate == RowFate::kept) continue;
    FillResult::RowChange c;
    c.change = fate_name(fate);
    c.row = static_cast<int64_t>(i);
    c.old_row = fate == RowFate::moved || fate == RowFate::copy ? plan_.source[i] : plan_.found[i];
    c.encoded = plan_.source[i] < 0;
    key(c, new_keys_, c.row);
    out.push_back(std::move(c));
  }
  for (const int64_t r : plan_.removed_rows) {
    FillResult::RowChange c;
    c.change = "removed";
    c.old_row = r;
    key(c, old_keys_, r);
    out.push_back(std::move(c));
  }
  return out;
}

std::string Update::identity() const {
  ContentHash h;
  h.update(plan_.source.data(), plan_.source.size() * sizeof(int64_t));
  return old_.fingerprint + ":" + h.hex_digest();
}

Inputs Update::encoded_inputs(const Inputs& in, int64_t begin) const {
  std::vector<int64_t> rows;
  for (int64_t r : rows_to_encode_) rows.push_back(begin + r);
  Inputs view;
  view.source = in.source;
  view.per_encoder = in.per_encoder;
  view.per_encoder_text = in.per_encoder_text;
  view.unit = in.unit;
  view.max_tokens = in.max_tokens;  // a length window's batches capped as the fill's (it was 0: rows only)
  view.readers = in.readers;
  view.rows = static_cast<int64_t>(rows.size());
  for (const auto& [name, d] : in.features) {
    Input v = d;
    v.col = io::source::gathered(d.col, rows);
    view.features.emplace(name, std::move(v));
  }
  for (const auto& [key, t] : in.texts) {
    TextInput v = t;
    v.col = io::source::gathered(t.col, rows);
    view.texts.emplace(key, std::move(v));
  }
  view.input_rows = std::move(rows);
  return view;
}

}  // namespace traincache::fill
