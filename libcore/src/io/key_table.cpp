// Key tables: a field of a table keyed by the input's keys, put in the input's row order
// (cache-fill --labels TABLE:FIELD).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "file_columns.h"
#include "traincache/base/error.h"
#include "traincache/base/format.h"
#include "traincache/io/source.h"

namespace traincache::io::source {

namespace {

// A column's rows as text: strings as they are, integers in decimal.
std::vector<std::string> texts_of(const Column& col, const std::string& what) {
  const ColumnInfo& info = col.info();
  if (info.shape.size() != 1 || !(info.dtype == DType::string || is_integer(info.dtype)))
    throw Error(Exit::data, what, "'" + info.name + "' must be 1-D integers or strings to serve as keys");
  if (info.dtype == DType::string) return col.read_strings(0, info.rows());
  std::vector<char> raw(info.row_bytes() * static_cast<std::size_t>(info.rows()));
  if (!raw.empty()) col.read(0, info.rows(), raw.data());
  std::vector<int64_t> values(static_cast<std::size_t>(info.rows()));
  to_int64(info.dtype, raw.data(), values.data(), values.size());
  std::vector<std::string> out;
  out.reserve(values.size());
  for (int64_t v : values) out.push_back(std::to_string(v));
  return out;
}

// The table's row of each key; a key held twice is refused.
std::map<std::string, int64_t> index_keys(const std::vector<std::string>& keys, const std::string& table) {
  std::map<std::string, int64_t> at;
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (!at.emplace(keys[i], static_cast<int64_t>(i)).second)
      throw Error(Exit::data, table, "key '" + keys[i] + "' is in the table twice; each key needs one row");
  return at;
}

}  // namespace

bool is_key_table(const std::string& path) {
  const Kind k = kind_of(path);
  return k == Kind::manifest || k == Kind::npz;
}

std::vector<std::string> key_texts(const Column* keys, int64_t rows) {
  if (keys) return texts_of(*keys, keys->path());
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) out.push_back(std::to_string(r));
  return out;
}

std::shared_ptr<const Column> joined_on_keys(const std::string& table, const std::string& field,
                                             const std::vector<std::string>& keys, const FileOptions& files) {
  const auto index = index_keys(texts_of(*open_column(table, "key", files, Role::value), table), table);
  std::shared_ptr<const Column> values = open_column(table, field, files, Role::labels);
  std::vector<int64_t> rows;
  rows.reserve(keys.size());
  int64_t missing = 0;
  std::string first;
  for (const auto& k : keys) {
    auto it = index.find(k);
    if (it == index.end() && missing++ == 0) first = k;
    rows.push_back(it == index.end() ? 0 : it->second);
  }
  if (missing == static_cast<int64_t>(keys.size()) && !index.empty())
    throw Error(Exit::data, table,
                "none of the input's keys is in the table (the input's first is '" + first + "', the table's '" +
                    index.begin()->first +
                    "'): the input's keys are --key's values, an image folder's file paths, "
                    "tar samples' __key__, else the row numbers");
  if (missing > 0)
    throw Error(Exit::data, table,
                "no row for key '" + first + "'" +
                    (missing > 1 ? " and " + std::to_string(missing - 1) + " more keys" : std::string()) + " of the " +
                    std::to_string(keys.size()) + " input rows; '" + field + "' needs a value for every row");
  if (values->info().dtype != DType::i64 || values->info().shape.size() != 1) return gathered(values, std::move(rows));
  // Integer labels (a manifest's, or strings numbered as names): held, so that the names count
  // in the column's digest as they do in the table's.
  std::vector<int64_t> all(static_cast<std::size_t>(values->info().rows())), mine;
  if (!all.empty()) values->read(0, values->info().rows(), all.data());
  mine.reserve(rows.size());
  for (int64_t r : rows) mine.push_back(all[static_cast<std::size_t>(r)]);
  return std::make_shared<IntColumn>(values->kind(), table, field, std::move(mine), values->label_names(),
                                     values->warning());
}

}  // namespace traincache::io::source
