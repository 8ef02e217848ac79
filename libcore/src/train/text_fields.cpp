// gc-train's text fields without LibTorch (train/text_fields.h).
#include "traincache/train/text_fields.h"

#include "traincache/base/error.h"
#include "traincache/io/source.h"
#include "traincache/train/dist_launch.h"
#include "traincache/train/train_plan.h"

namespace traincache::train {

namespace {

// The texts of field `field` of `file` and how many each row holds (1, or k for lists).
std::vector<std::string> read_texts(const TrainOptions& o, const std::string& file, const std::string& field,
                                    bool lists, int64_t& per_row, int64_t& replaced) {
  io::source::FileOptions files = o.files;
  files.strict_utf8 = o.tokenize.strict_utf8;
  auto col = io::source::open_column(file, field, files, io::source::Role::text);
  const auto& ci = col->info();
  if (ci.dtype != DType::string || ci.shape.size() > (lists ? 2u : 1u))
    throw Error(Exit::data, file,
                "text field '" + field + "' must hold " +
                    (lists ? "a string or a list of strings per row" : "one string per row") +
                    " (a manifest field or an HDF5 string dataset)");
  per_row = ci.shape.size() == 2 ? ci.shape[1] : 1;
  replaced += col->utf8_replaced();
  auto texts = col->read_strings(0, ci.rows());
  for (std::size_t i = 0; i < texts.size(); ++i)
    if (texts[i].empty())
      throw Error(Exit::data,
                  file + ": field '" + field + "' row " + std::to_string(i / static_cast<std::size_t>(per_row)) +
                      (per_row > 1 ? " item " + std::to_string(i % static_cast<std::size_t>(per_row)) : ""),
                  "empty text");
  return texts;
}

}  // namespace

void same_rows(const std::string& path, const std::string& a, int64_t na, const std::string& b, int64_t nb) {
  if (na != nb)
    throw Error(
        Exit::data, path,
        "rows mismatch: '" + a + "' has " + std::to_string(na) + " rows but '" + b + "' has " + std::to_string(nb));
}

TextFields read_text_fields(const TrainOptions& o, const std::string& file, const std::vector<std::string>& fields,
                            const std::vector<std::string>& negatives, const std::string& tok_path) {
  TextFields t;
  t.tokenizer = tok_path;
  t.tok = text::load(tok_path);
  int64_t one = 1;
  t.texts = read_texts(o, file, fields[0], false, one, t.utf8_replaced);
  if (!negatives.empty()) {
    t.negatives = read_texts(o, file, negatives[0], true, t.per_row, t.utf8_replaced);
    same_rows(file, fields[0], static_cast<int64_t>(t.texts.size()), negatives[0],
              static_cast<int64_t>(t.negatives.size()) / t.per_row);
  }
  return t;
}

TextAhead read_text_ahead(const TrainOptions& o) {
  TextAhead ahead;
  if (o.data.empty() || read_launch().distributed()) return ahead;
  if (const auto tok = side_tokenizer(o, true); !tok.empty())
    ahead.query = read_text_fields(o, o.data, o.query, {}, tok);
  if (const auto tok = side_tokenizer(o, false); !o.passage.empty() && !tok.empty())
    ahead.passage = read_text_fields(o, o.data, o.passage, o.negatives, tok);
  return ahead;
}

}  // namespace traincache::train
