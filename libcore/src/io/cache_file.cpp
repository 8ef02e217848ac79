#include "traincache/io/cache_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/base/format.h"
#include "traincache/base/json_text.h"
#include "traincache/io/h5.h"

namespace traincache::io::cache {

namespace {

using nlohmann::json;

std::vector<std::string> json_string_list(const std::string& text) {
  std::vector<std::string> out;
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_array())
    for (const auto& v : j)
      if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

// Reads rows [start, start+count) of a string or numeric 1-D dataset as text.
std::vector<std::string> read_as_text(hid_t dset, const h5::DatasetInfo& info, int64_t start, int64_t count) {
  std::vector<std::string> out;
  if (info.dtype == DType::string) {
    h5::Id ftype(H5Dget_type(dset));
    if (info.vlen_string) {
      std::vector<char*> ptrs(static_cast<std::size_t>(count));
      h5::read_rows(dset, info.name, start, count, ftype.get(), ptrs.data());
      for (auto* p : ptrs) {
        out.emplace_back(p ? p : "");
        H5free_memory(p);
      }
    } else {
      std::vector<char> buf(static_cast<std::size_t>(count) * info.type_size);
      h5::read_rows(dset, info.name, start, count, ftype.get(), buf.data());
      for (int64_t i = 0; i < count; ++i) {
        const char* p = buf.data() + i * info.type_size;
        out.emplace_back(p, strnlen(p, info.type_size));
      }
    }
  } else if (is_float(info.dtype)) {
    std::vector<double> v(static_cast<std::size_t>(count));
    h5::read_rows(dset, info.name, start, count, H5T_NATIVE_DOUBLE, v.data());
    char text[32];  // the shortest text that reads back as the value ("0.25", "1e-05")
    for (double d : v) out.emplace_back(text, std::to_chars(text, text + sizeof text, d).ptr);
  } else {
    std::vector<int64_t> v(static_cast<std::size_t>(count));
    h5::read_rows(dset, info.name, start, count, H5T_NATIVE_INT64, v.data());
    for (auto x : v) out.push_back(std::to_string(x));
  }
  return out;
}

// h5::describe, with the file named in its errors.
h5::DatasetInfo describe_in(hid_t d, const std::string& path, const std::string& dpath) {
  try {
    return h5::describe(d, dpath);
  } catch (const Error& e) {
    throw Error(e.code(), path, e.what());
  }
}

// Checks a dataset's storage before anything reads it: a contiguous or chunked dataset cannot
// hold more bytes than the whole file (a small file claiming terabytes is corrupt, and reading it
// would take hours); a virtual dataset's sources are collected for check_virtual_sources().
void check_storage(hid_t d, const std::string& path, const std::string& dpath, const h5::DatasetInfo& di,
                   int64_t file_size, std::set<std::string>& virtual_sources) {
  h5::Id dcpl(H5Dget_create_plist(d));
  if (!dcpl) throw Error(Exit::data, path, dpath + ": cannot read its storage layout");
  if (H5Pget_layout(dcpl.get()) == H5D_VIRTUAL) {
    size_t count = 0;
    if (H5Pget_virtual_count(dcpl.get(), &count) < 0)
      throw Error(Exit::data, path, dpath + ": cannot read its virtual mapping");
    for (size_t i = 0; i < count; ++i) {
      ssize_t n = H5Pget_virtual_filename(dcpl.get(), i, nullptr, 0);
      if (n < 0) throw Error(Exit::data, path, dpath + ": cannot read its virtual mapping");
      std::string name(static_cast<std::size_t>(n) + 1, '\0');
      H5Pget_virtual_filename(dcpl.get(), i, name.data(), name.size());
      name.resize(static_cast<std::size_t>(n));
      virtual_sources.insert(name);
    }
    return;
  }
  if (H5Pget_nfilters(dcpl.get()) > 0) return;  // compressed: the stored size says nothing
  uint64_t claimed = di.type_size;
  for (auto dim : di.shape)
    if (dim < 0 || __builtin_mul_overflow(claimed, static_cast<uint64_t>(dim), &claimed))
      throw Error(Exit::data, path, dpath + ": its shape does not fit 64 bits");
  if (claimed > static_cast<uint64_t>(file_size))
    throw Error(Exit::data, path,
                dpath + " claims " + std::to_string(claimed) + " bytes but the file has only " +
                    std::to_string(file_size) + " (truncated or corrupt)");
}

// A merged cache reads its rows from shard files through virtual datasets: every source must be
// another file that exists and is a complete shard of the same job; a missing one would read as
// zeros, and one that maps back onto this file would recurse until the stack overflows.
void check_virtual_sources(hid_t f, const std::string& path, const std::set<std::string>& sources) {
  if (sources.empty()) return;
  auto job = h5::read_attr_string(f, "job_fingerprint");
  for (const auto& name : sources) {
    std::string src = name.empty() || name[0] == '/' ? name : files::dir_name(path) + "/" + name;
    if (name == "." || files::same_file(src, path))
      throw Error(Exit::data, path, "a virtual dataset maps onto its own file (self-referencing merge)");
    struct stat st;
    if (::stat(src.c_str(), &st) != 0)
      throw Error(Exit::data, path, "virtual source " + src + " is missing (" + errno_text(errno) + ")");
    h5::Id sf = h5::open_file(src);
    auto complete = h5::read_attr_int(sf.get(), "complete");
    auto src_job = h5::read_attr_string(sf.get(), "job_fingerprint");
    if (h5::read_attr_string(sf.get(), "format").value_or("") != kFormatName || complete.value_or(0) != 1 || !src_job ||
        (job && *src_job != *job))
      throw Error(Exit::data, path, "virtual source " + src + " is not a complete shard of this cache's job");
  }
}

}  // namespace

std::string encoder_names(const CacheInfo& info) {
  std::vector<std::string> names;
  for (const auto& e : info.embeddings) names.push_back(e.name);
  return name_list(names);
}

namespace {

// The text inputs of a cache (its "text" attribute) and its length window.
void read_text_info(hid_t f, const std::string& path, CacheInfo& info) {
  info.length_window = h5::read_attr_int(f, "length_window").value_or(0);
  auto attr = h5::read_attr_string(f, "text");
  if (!attr) return;
  auto j = nlohmann::json::parse(*attr, nullptr, false);
  if (!j.is_object()) throw Error(Exit::data, path, "unreadable text attribute");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const nlohmann::json& v = it.value();
    if (!v.is_object()) throw Error(Exit::data, path, "unreadable text attribute");
    // Members of another type read as absent: the attribute is data, not trusted.
    auto str = [&v](const char* k) { return v.contains(k) && v[k].is_string() ? v[k].get<std::string>() : ""; };
    auto num = [&v](const char* k) { return v.contains(k) && v[k].is_number_integer() ? v[k].get<int64_t>() : 0; };
    auto flag = [&v](const char* k) { return v.contains(k) && v[k].is_boolean() && v[k].get<bool>(); };
    TextInfo t;
    t.key = it.key();
    t.field = str("field");
    t.tokenizer_path = str("tokenizer_path");
    t.tokenizer_sha256 = str("tokenizer_sha256");
    t.tokenizer_kind = str("tokenizer_kind");
    t.padding = str("padding");
    t.max_length = num("max_length");
    t.pad_id = num("pad_id");
    t.strict_utf8 = flag("strict_utf8");
    t.ragged = flag("ragged");
    info.text.push_back(std::move(t));
  }
}

// The text keys each encoder read, from the fingerprint document.
std::map<std::string, std::vector<std::string>> text_keys(const std::string& fingerprint_json) {
  std::map<std::string, std::vector<std::string>> out;
  auto j = nlohmann::json::parse(fingerprint_json, nullptr, false);
  if (!j.is_object() || !j.contains("encoders") || !j["encoders"].is_object()) return out;
  for (auto it = j["encoders"].begin(); it != j["encoders"].end(); ++it) {
    const auto& e = it.value();
    if (!e.is_object() || !e.contains("text") || !e["text"].is_array()) continue;
    for (const auto& k : e["text"])
      if (k.is_string()) out[it.key()].push_back(k.get<std::string>());
  }
  return out;
}

}  // namespace

namespace {

// The root attributes: format and version checked, the rest as stored.
void read_root_attrs(hid_t f, const std::string& path, CacheInfo& info) {
  auto format = h5::read_attr_string(f, "format");
  if (!format || *format != kFormatName)
    throw Error(Exit::data, path, "not a traincache cache (no format=\"traincache\" attribute)");
  auto version = h5::read_attr_int(f, "format_version");
  if (!version) throw Error(Exit::data, path, "missing format_version attribute");
  if (*version > kFormatVersion)
    throw Error(Exit::data, path,
                "format version " + std::to_string(*version) + " is newer than this tool reads (" +
                    std::to_string(kFormatVersion) + ")");
  info.format_version = *version;
  info.complete = h5::read_attr_int(f, "complete").value_or(0) == 1;
  info.rows = h5::read_attr_int(f, "rows").value_or(-1);
  info.row_start = h5::read_attr_int(f, "row_start").value_or(0);
  info.fingerprint = h5::read_attr_string(f, "fingerprint").value_or("");
  info.fingerprint_json = h5::read_attr_string(f, "fingerprint_json").value_or("");
  info.job_fingerprint_json = h5::read_attr_string(f, "job_fingerprint_json").value_or("");
  info.created_by = h5::read_attr_string(f, "created_by").value_or("");
  info.input_path = h5::read_attr_string(f, "input_path").value_or("");
  info.features = json_string_list(h5::read_attr_string(f, "features").value_or("[]"));
  info.input_scale = h5::read_attr_double(f, "input_scale").value_or(0);
  info.input_kind = h5::read_attr_string(f, "input_kind").value_or("");
  info.history = parse_history(h5::read_attr_string(f, "history").value_or("[]"));
  if (h5::read_attr_string(f, "merged_from")) {
    info.kind = CacheKind::merged;
  } else if (auto shard = h5::read_attr_int(f, "shard_index")) {
    info.kind = CacheKind::shard;
    info.shard_index = *shard;
    info.shard_count = h5::read_attr_int(f, "shard_count").value_or(0);
  }
  if (auto pre = h5::read_attr_string(f, "preprocess")) {
    auto j = nlohmann::ordered_json::parse(*pre, nullptr, false);
    if (!j.is_object()) throw Error(Exit::data, path, "unreadable preprocess attribute");
    for (auto& [k, v] : j.items()) info.preprocess.emplace_back(k, v.is_string() ? v.get<std::string>() : json_text(v));
  }
}

}  // namespace

const char* cache_kind_name(CacheKind kind) {
  switch (kind) {
    case CacheKind::shard:
      return "shard";
    case CacheKind::merged:
      return "merged";
    case CacheKind::filled:
      break;
  }
  return "filled";
}

namespace {

// /embeddings/<name> as described by `di` and its attributes (`text`: the text keys by encoder).
EmbeddingInfo read_embedding(hid_t d, const std::string& name, const h5::DatasetInfo& di,
                             const std::map<std::string, std::vector<std::string>>& text) {
  EmbeddingInfo e;
  e.name = name;
  e.shape = di.shape;
  e.dtype = di.dtype;
  e.bytes = di.type_size;
  for (auto s : di.shape) e.bytes *= static_cast<uint64_t>(s);
  e.encoder_path = h5::read_attr_string(d, "encoder_path").value_or("");
  e.encoder_sha256 = h5::read_attr_string(d, "encoder_sha256").value_or("");
  e.features = json_string_list(h5::read_attr_string(d, "features").value_or("[]"));
  e.output = h5::read_attr_string(d, "output").value_or("");
  if (auto t = text.find(name); t != text.end()) e.text = t->second;
  e.inference = h5::read_attr_string(d, "inference").value_or("");
  e.math_mode = h5::read_attr_string(d, "math_mode").value_or("");
  e.precision = h5::read_attr_string(d, "precision").value_or("");
  e.int8_weight_max = h5::read_attr_int(d, "int8_weight_max").value_or(0);
  e.optimize_max_abs_diff = h5::read_attr_double(d, "optimize_max_abs_diff").value_or(0);
  e.precision_max_rel_diff = h5::read_attr_double(d, "precision_max_rel_diff").value_or(0);
  e.batch_max_abs_diff = h5::read_attr_double(d, "batch_max_abs_diff").value_or(-1);
  e.batch_max_rel_diff = h5::read_attr_double(d, "batch_max_rel_diff").value_or(-1);
  return e;
}

// Tallies a label column of one integer per row into its counts.
void count_label_classes(hid_t f, const std::string& path, LabelInfo& li) {
  if (!is_integer(li.dtype) || li.shape.size() != 1) return;
  h5::Id labels = h5::open_dataset(f, path, li.dataset);
  constexpr int64_t kBlock = 1 << 16;
  std::vector<int64_t> buf;
  for (int64_t s = 0; s < li.rows; s += kBlock) {
    int64_t n = std::min(kBlock, li.rows - s);
    buf.resize(static_cast<std::size_t>(n));
    h5::read_rows(labels.get(), path + ": " + li.dataset, s, n, H5T_NATIVE_INT64, buf.data());
    for (auto v : buf) ++li.counts[v];
  }
}

// The label column at `dataset`, its storage checked as every dataset's.
LabelInfo read_label_column(hid_t f, const std::string& path, const std::string& dataset, int64_t file_size,
                            std::set<std::string>& sources) {
  h5::Id d = h5::open_dataset(f, path, dataset);
  auto di = describe_in(d.get(), path, dataset);
  check_storage(d.get(), path, dataset, di, file_size, sources);
  LabelInfo li;
  li.dataset = dataset;
  li.source = h5::read_attr_string(d.get(), "source").value_or("");
  li.name = h5::read_attr_string(d.get(), "name").value_or(source::label_column_name(li.source));
  li.dtype = di.dtype;
  li.rows = di.rows();
  li.shape = di.shape;
  li.names = json_string_list(h5::read_attr_string(d.get(), "label_names").value_or("[]"));
  return li;
}

// /labels and the columns of /label_columns, in the order the root's `label_columns` lists them.
void read_label_columns(hid_t f, const std::string& path, int64_t file_size, std::set<std::string>& sources,
                        CacheInfo& info) {
  if (h5::exists(f, kLabels)) info.labels = read_label_column(f, path, kLabels, file_size, sources);
  if (!h5::exists(f, kLabelColumns)) return;
  std::vector<std::string> order;
  for (const auto& j : nlohmann::json::parse(h5::read_attr_string(f, "label_columns").value_or("[]"), nullptr, false))
    if (j.is_object() && j.contains("name") && j["name"].is_string()) order.push_back(j["name"].get<std::string>());
  std::vector<std::string> names;
  try {
    names = h5::list_group(f, kLabelColumns);
  } catch (const Error& e) {
    throw Error(Exit::data, path, e.what());
  }
  auto rank = [&](const std::string& n) { return std::find(order.begin(), order.end(), n) - order.begin(); };
  std::stable_sort(names.begin(), names.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  for (const auto& n : names)
    info.more_labels.push_back(read_label_column(f, path, std::string(kLabelColumns) + "/" + n, file_size, sources));
}

}  // namespace

History parse_history(const std::string& text) {
  const auto list = nlohmann::json::parse(text, nullptr, false);
  History out;
  if (!list.is_array()) return out;
  for (const auto& j : list) {
    if (!j.is_object()) continue;
    HistoryEntry e;
    e.run = j.value("run", std::string("?"));
    e.rows = j.value("rows", int64_t{0});
    e.encoded = j.value("encoded", int64_t{0});
    if (j.contains("copied"))
      e.update = HistoryEntry::Update{j.value("copied", int64_t{0}),
                                      j.value("added", int64_t{0}),
                                      j.value("changed", int64_t{0}),
                                      j.value("removed", int64_t{0}),
                                      j.value("unchanged", j.value("kept", int64_t{0})),
                                      j.value("matched_by", std::string("?")),
                                      j.value("moved", int64_t{0}),
                                      j.value("copies", int64_t{0})};
    e.shard = j.value("shard", int64_t{-1});
    e.shards = j.value("shards", int64_t{0});
    out.push_back(std::move(e));
  }
  return out;
}

std::string history_text(const History& history) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& e : history) {
    nlohmann::json j{{"run", e.run}, {"rows", e.rows}};
    if (e.run == "merge")
      j["shards"] = e.shards;
    else
      j["encoded"] = e.encoded;
    if (e.update) {
      j["copied"] = e.update->copied;
      j["matched_by"] = e.update->matched_by;
      j["added"] = e.update->added;
      j["changed"] = e.update->changed;
      j["removed"] = e.update->removed;
      j["unchanged"] = e.update->unchanged;
      j["kept"] = e.update->unchanged;  // its name in 0.1 (and the only one older readers know): written until 0.2
      if (e.update->moved) j["moved"] = e.update->moved;
      if (e.update->copies) j["copies"] = e.update->copies;
    }
    if (e.shard >= 0) j["shard"] = e.shard;
    list.push_back(std::move(j));
  }
  return json_text(list);
}

std::string precision_of(const EmbeddingInfo& e) { return e.precision.empty() ? "fp32" : e.precision; }

int64_t int8_weight_max(const EmbeddingInfo& e) {
  return e.int8_weight_max != 0 ? e.int8_weight_max : kInt8WeightMaxUnrecorded;
}

const std::string& making_fingerprint_json(const CacheInfo& info) {
  return info.kind == CacheKind::merged && !info.job_fingerprint_json.empty() ? info.job_fingerprint_json
                                                                              : info.fingerprint_json;
}

CacheInfo read_info(const std::string& path, bool count_labels) {
  h5::Id file = h5::open_file(path);
  hid_t f = file.get();
  CacheInfo info;
  info.path = path;
  read_root_attrs(f, path, info);
  read_text_info(f, path, info);
  struct stat fst;
  if (::stat(path.c_str(), &fst) != 0) throw Error(Exit::no_input, path, errno_text(errno));
  std::set<std::string> sources;

  std::vector<std::string> names;
  try {
    names = h5::list_group(f, "/embeddings");
  } catch (const Error& e) {
    throw Error(Exit::data, path, e.what());
  }
  const auto text = text_keys(making_fingerprint_json(info));
  for (const auto& name : names) {
    std::string dpath = "/embeddings/" + name;
    h5::Id d = h5::open_dataset(f, path, dpath);
    auto di = describe_in(d.get(), path, dpath);
    check_storage(d.get(), path, dpath, di, fst.st_size, sources);
    info.embeddings.push_back(read_embedding(d.get(), name, di, text));
  }

  read_label_columns(f, path, fst.st_size, sources, info);
  if (h5::exists(f, "/keys")) {
    h5::Id d = h5::open_dataset(f, path, "/keys");
    info.keys_source = h5::read_attr_string(d.get(), "source").value_or("");
    auto di = describe_in(d.get(), path, "/keys");
    check_storage(d.get(), path, "/keys", di, fst.st_size, sources);
    info.keys_dtype = di.dtype;
  }
  if (h5::exists(f, "/skipped/rows")) {
    h5::Id d = h5::open_dataset(f, path, "/skipped/rows");
    info.skipped = describe_in(d.get(), path, "/skipped/rows").rows();
  }
  const std::pair<const char*, bool*> digests[] = {{"/row_digests", &info.row_digests},
                                                   {"/row_file_digests", &info.row_file_digests}};
  for (const auto& [name, has] : digests) {
    if (!h5::exists(f, name)) continue;
    h5::Id d = h5::open_dataset(f, path, name);
    check_storage(d.get(), path, name, describe_in(d.get(), path, name), fst.st_size, sources);
    *has = true;
  }
  check_virtual_sources(f, path, sources);
  // Only now, with sizes and sources checked, is any data read.
  if (count_labels) {
    if (info.labels) count_label_classes(f, path, *info.labels);
    for (auto& li : info.more_labels) count_label_classes(f, path, li);
  }
  return info;
}

namespace {

// Calls fn(block_start, block_rows, float* data) over every row of an embedding, in blocks.
template <class Fn>
void for_each_block(hid_t file, const std::string& path, const std::string& dpath, Fn fn) {
  h5::Id d = h5::open_dataset(file, path, dpath);
  auto di = h5::describe(d.get(), dpath);
  int64_t per_row = di.row_elements();
  int64_t block = h5::rows_per_block(per_row * 4, 4 << 20);
  std::vector<float> buf;
  for (int64_t s = 0; s < di.rows(); s += block) {
    int64_t n = std::min(block, di.rows() - s);
    buf.resize(static_cast<std::size_t>(n * per_row));
    h5::read_rows(d.get(), path + ": " + dpath, s, n, H5T_NATIVE_FLOAT, buf.data());
    fn(s, n, per_row, buf.data());
  }
}

}  // namespace

std::vector<EmbeddingStats> compute_stats(const std::string& path) {
  CacheInfo info = read_info(path, false);
  h5::Id file = h5::open_file(path);
  std::vector<EmbeddingStats> out;
  for (const auto& e : info.embeddings) {
    EmbeddingStats st;
    st.name = e.name;
    double sum = 0, sumsq = 0;
    int64_t finite_rows = 0;
    st.norm_min = INFINITY;
    st.norm_max = -INFINITY;
    for_each_block(file.get(), path, "/embeddings/" + e.name,
                   [&](int64_t, int64_t n, int64_t per_row, const float* data) {
                     for (int64_t r = 0; r < n; ++r) {
                       double sq = 0;
                       bool finite = true;
                       for (int64_t k = 0; k < per_row; ++k) {
                         float v = data[r * per_row + k];
                         if (std::isnan(v))
                           ++st.nan_count, finite = false;
                         else if (std::isinf(v))
                           ++st.inf_count, finite = false;
                         else
                           sq += double(v) * v;
                       }
                       ++st.rows;
                       if (!finite) continue;
                       double norm = std::sqrt(sq);
                       sum += norm;
                       sumsq += norm * norm;
                       ++finite_rows;
                       st.norm_min = std::min(st.norm_min, norm);
                       st.norm_max = std::max(st.norm_max, norm);
                     }
                   });
    if (finite_rows > 0) {
      st.norm_mean = sum / finite_rows;
      st.norm_std = std::sqrt(std::max(0.0, sumsq / finite_rows - st.norm_mean * st.norm_mean));
    } else {
      st.norm_min = st.norm_max = 0;
    }
    out.push_back(st);
  }
  return out;
}

namespace {

// "/NAME has N rows, expected R" when a dataset's rows are not the cache's.
void check_rows(std::vector<std::string>& problems, const std::string& name, int64_t n, int64_t rows) {
  if (n != rows) problems.push_back(name + " has " + std::to_string(n) + " rows, expected " + std::to_string(rows));
}

// The rows of `path`'s dataset `name`.
int64_t dataset_rows(const std::string& path, const std::string& name) {
  h5::Id f = h5::open_file(path);
  h5::Id d = h5::open_dataset(f.get(), path, name);
  return h5::describe(d.get(), name).rows();
}

// What a fill's (or a shard's, or a merged cache's job's) fingerprint promises its datasets hold,
// against what they hold: one dataset per encoder it names, of the dtype it names, labels and keys
// where it has them, and its input rows (a job's: all its shards'). A fingerprint of another shape
// (an older one) promises nothing here.
void promise_problems(std::vector<std::string>& p, const CacheInfo& info) {
  const json fp = json::parse(making_fingerprint_json(info), nullptr, false);
  if (!fp.is_object() || !fp.contains("encoders") || !fp["encoders"].is_object() || !fp.contains("input") ||
      !fp["input"].is_object())
    return;
  std::set<std::string> named, held;
  for (const auto& [name, e] : fp["encoders"].items()) named.insert(name);
  for (const auto& e : info.embeddings) held.insert(e.name);
  for (const auto& name : named)
    if (!held.empty() && !held.count(name))
      p.push_back("/embeddings/" + name + " is missing: the fingerprint names encoder " + name);
  for (const auto& name : held)
    if (!named.count(name)) p.push_back("/embeddings/" + name + " is not an encoder the fingerprint names");
  const auto& options = fp.value("options", json::object());
  if (options.is_object() && options.contains("dtype") && options["dtype"].is_string())
    for (const auto& e : info.embeddings)
      if ((e.dtype == DType::f32 || e.dtype == DType::f16) &&
          dtype_name(e.dtype) != options["dtype"].get<std::string>())
        p.push_back("/embeddings/" + e.name + " holds " + dtype_name(e.dtype) + ", the fingerprint says " +
                    options["dtype"].get<std::string>());
  const json& input = fp["input"];
  for (const auto& [what, has] : {std::pair<const char*, bool>{"labels", info.labels.has_value()},
                                  std::pair<const char*, bool>{"keys", info.keys_dtype.has_value()}}) {
    if (!input.contains(what)) continue;
    const bool promised = !input[what].is_null();
    if (promised != has)
      p.push_back(std::string("/") + what +
                  (promised ? " is missing: the fingerprint has " + std::string(what)
                            : " is there, but the fingerprint has no " + std::string(what)));
  }
  const json& more = input.value("label_columns", json::array());
  if (more.is_array() && more.size() != info.more_labels.size())
    p.push_back(std::string(kLabelColumns) + " holds " + std::to_string(info.more_labels.size()) +
                " label columns, the fingerprint has " + std::to_string(more.size()));
  const json& rows = input.contains("rows") ? input["rows"] : input.value("job_rows", json());
  if (rows.is_array() && rows.size() == 2 && rows[0].is_number_integer() && rows[1].is_number_integer()) {
    const int64_t want = rows[1].get<int64_t>() - rows[0].get<int64_t>();
    if (info.rows >= 0 && info.rows != want)
      p.push_back("holds " + std::to_string(info.rows) + " rows, the fingerprint's input has " + std::to_string(want));
  }
}

// /keys of one key per row, and /skipped as cache-fill writes it: rows a 1-D list of integers, each
// a row of the cache, ascending, and reasons as many UTF-8 strings (--export refuses others).
void skipped_problems(std::vector<std::string>& p, const std::string& path, int64_t rows) {
  h5::Id f = h5::open_file(path);
  if (h5::exists(f.get(), "/keys")) {
    h5::Id d = h5::open_dataset(f.get(), path, "/keys");
    if (h5::describe(d.get(), "/keys").shape.size() != 1) p.push_back("/keys is not one key per row (1-D)");
  }
  if (!h5::exists(f.get(), "/skipped/rows")) return;
  h5::Id rd = h5::open_dataset(f.get(), path, "/skipped/rows");
  const h5::DatasetInfo ri = h5::describe(rd.get(), "/skipped/rows");
  if (ri.shape.size() != 1 || !is_integer(ri.dtype)) {
    p.push_back("/skipped/rows is not a list of integers (1-D)");
    return;
  }
  h5::Id sd = h5::open_dataset(f.get(), path, "/skipped/reasons");
  h5::Id type(H5Dget_type(sd.get()));
  if (!type || H5Tget_class(type.get()) != H5T_STRING || H5Tget_cset(type.get()) != H5T_CSET_UTF8 ||
      h5::describe(sd.get(), "/skipped/reasons").shape.size() != 1) {
    p.push_back("/skipped/reasons is not a list of UTF-8 strings");
    return;
  }
  const std::vector<std::pair<int64_t, std::string>> skipped = read_skipped(path);
  int64_t previous = -1;
  for (const auto& [row, why] : skipped) {
    if (row < 0 || row >= rows || row <= previous) {
      p.push_back("/skipped/rows holds " + std::to_string(row) + ", not a row of the cache after " +
                  (previous < 0 ? std::string("the start") : std::to_string(previous)));
      return;
    }
    previous = row;
  }
}

}  // namespace

std::vector<const LabelInfo*> label_columns(const CacheInfo& info) {
  std::vector<const LabelInfo*> out;
  if (info.labels) out.push_back(&*info.labels);
  for (const auto& l : info.more_labels) out.push_back(&l);
  return out;
}

std::optional<std::string> class_name(const LabelInfo& column, int64_t value) {
  if (!is_integer(column.dtype) || value < 0 || value >= static_cast<int64_t>(column.names.size())) return std::nullopt;
  return column.names[static_cast<std::size_t>(value)];
}

const LabelInfo& label_column(const CacheInfo& info, const std::string& name, const std::string& what) {
  const auto all = label_columns(info);
  if (all.empty()) throw Error(Exit::usage, what, "the cache has no labels (cache-fill ran without --labels)");
  if (name.empty()) return *all.front();
  std::vector<std::string> names;
  for (const LabelInfo* l : all) {
    if (l->name == name) return *l;
    names.push_back(l->name);
  }
  throw Error(Exit::usage, what, "the cache has no label column '" + name + "' (it has " + name_list(names) + ")");
}

std::vector<std::string> structure_problems(const CacheInfo& info, const std::string& path) {
  std::vector<std::string> p;
  if (!info.complete) p.push_back("incomplete (complete attribute is not 1)");
  if (info.rows < 0) p.push_back("missing rows attribute");
  if (info.fingerprint.empty()) p.push_back("missing fingerprint attribute");
  if (info.embeddings.empty()) p.push_back("no datasets under /embeddings");
  for (const auto& e : info.embeddings) {
    check_rows(p, "/embeddings/" + e.name, e.shape.empty() ? 0 : e.shape[0], info.rows);
    if (e.dtype != DType::f32 && e.dtype != DType::f16)
      p.push_back("/embeddings/" + e.name + " holds " + dtype_name(e.dtype) + ", not float32 or float16");
  }
  for (const LabelInfo* l : label_columns(info)) check_rows(p, l->dataset, l->rows, info.rows);
  if (info.keys_dtype) check_rows(p, "/keys", dataset_rows(path, "/keys"), info.rows);
  if (info.row_digests) check_rows(p, "/row_digests", dataset_rows(path, "/row_digests"), info.rows);
  if (info.row_file_digests) check_rows(p, "/row_file_digests", dataset_rows(path, "/row_file_digests"), info.rows);
  promise_problems(p, info);
  try {
    skipped_problems(p, path, info.rows);
  } catch (const Error& e) {
    p.push_back(e.what());
  }
  return p;
}

void require_sound_structure(const CacheInfo& info, const std::string& path) {
  if (const auto problems = structure_problems(info, path); !problems.empty())
    throw Error(Exit::data, path, "damaged: " + problems.front() + " (cache-inspect --check lists what is wrong)");
}

CheckReport check(const std::string& path) {
  CheckReport rep;
  rep.path = path;
  try {
    rep.problems = structure_problems(read_info(path, false), path);
    if (!rep.problems.empty()) return rep;
    for (const auto& st : compute_stats(path))
      if (st.nan_count || st.inf_count)
        rep.problems.push_back("/embeddings/" + st.name + " holds " + std::to_string(st.nan_count) + " NaN and " +
                               std::to_string(st.inf_count) + " Inf values");
  } catch (const Error& e) {
    rep.problems.push_back(e.what());
  }
  return rep;
}

std::vector<CacheRow> read_head(const std::string& path, int64_t n) {
  CacheInfo info = read_info(path, false);
  h5::Id file = h5::open_file(path);
  n = std::max<int64_t>(0, std::min(n, info.rows));
  std::vector<CacheRow> rows(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    rows[i].index = i;
    rows[i].key = std::to_string(info.row_start + i);
  }
  if (n == 0) return rows;
  if (info.keys_dtype) {
    h5::Id d = h5::open_dataset(file.get(), path, "/keys");
    auto keys = read_as_text(d.get(), h5::describe(d.get(), "/keys"), 0, n);
    for (int64_t i = 0; i < n; ++i) rows[i].key = keys[i];
  }
  for (const LabelInfo* l : label_columns(info)) {
    h5::Id d = h5::open_dataset(file.get(), path, l->dataset);
    auto di = h5::describe(d.get(), l->dataset);
    if (di.shape.size() != 1) continue;
    auto labels = read_as_text(d.get(), di, 0, n);
    for (int64_t i = 0; i < n; ++i) {
      if (l == &*info.labels) rows[i].label = labels[i];
      rows[i].labels.emplace_back(l->name, labels[i]);
      int64_t value = -1;  // a value past int64 (uint64 labels) names no class; class_name checks the rest
      std::from_chars(labels[i].data(), labels[i].data() + labels[i].size(), value);
      if (auto name = class_name(*l, value)) rows[i].classes[l->name] = *name;
    }
  }
  for (const auto& e : info.embeddings) {
    h5::Id d = h5::open_dataset(file.get(), path, "/embeddings/" + e.name);
    auto di = h5::describe(d.get(), e.name);
    int64_t per_row = di.row_elements();
    std::vector<float> buf(static_cast<std::size_t>(n * per_row));
    h5::read_rows(d.get(), path, 0, n, H5T_NATIVE_FLOAT, buf.data());
    for (int64_t i = 0; i < n; ++i)
      rows[i].embeddings[e.name].assign(buf.begin() + i * per_row, buf.begin() + (i + 1) * per_row);
  }
  return rows;
}

std::vector<float> read_embedding_rows(const std::string& path, const std::string& name,
                                       const std::vector<int64_t>& indices) {
  h5::Id file = h5::open_file(path);
  std::string dpath = "/embeddings/" + name;
  h5::Id d = h5::open_dataset(file.get(), path, dpath);
  auto di = h5::describe(d.get(), dpath);
  int64_t per_row = di.row_elements();
  std::vector<float> out(indices.size() * static_cast<std::size_t>(per_row));
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= di.rows())
      throw Error(Exit::usage, path, "row " + std::to_string(indices[i]) + " out of range");
    h5::read_rows(d.get(), path + ": " + dpath, indices[i], 1, H5T_NATIVE_FLOAT, out.data() + i * per_row);
  }
  return out;
}

}  // namespace traincache::io::cache
