// gc-train's text fields without LibTorch: the texts of a manifest field or an HDF5 string
// dataset, and the check that two datasets of a file have as many rows. A single process reads
// --data's text sides with its tokenizers before it loads LibTorch (so that a manifest it cannot
// train on is refused at once) and hands them to the engine, which tokenizes them
// (train/text_side.cpp): nothing is read twice.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "traincache/text/tokenizer.h"
#include "traincache/train/train.h"

namespace traincache::train {

/// One text side of a file: its tokenizer, the texts of its field, then those of its hard negatives.
struct TextFields {
  std::string tokenizer;  ///< its file
  std::shared_ptr<const text::Tokenizer> tok;
  std::vector<std::string> texts;      ///< one a row
  std::vector<std::string> negatives;  ///< `per_row` a row, row after row
  int64_t per_row = 0;                 ///< hard negatives a row (0: none)
  int64_t utf8_replaced = 0;           ///< ill-formed UTF-8 sequences replaced with U+FFFD
};

/// --data's text sides read before LibTorch is loaded; a side left unset (tensors, or not read
/// ahead) is read by the engine.
struct TextAhead {
  std::optional<TextFields> query, passage;
};

/// fields[0] of `file` (and its hard negatives, negatives[0]) with the tokenizer `tok_path`: the
/// tokenizer loaded, the texts read, none empty, as many negative rows as rows. Error otherwise.
TextFields read_text_fields(const TrainOptions& o, const std::string& file, const std::vector<std::string>& fields,
                            const std::vector<std::string>& negatives, const std::string& tok_path);

/// The text sides of --data (those with a tokenizer), read with read_text_fields; nothing for
/// cached embeddings (--cache) and for the ranks of a data-parallel job, which read their data
/// after they meet so that one rank's refusal reaches the others.
TextAhead read_text_ahead(const TrainOptions& o);

/// Error(data) unless datasets `a` and `b` of `path` have as many rows.
void same_rows(const std::string& path, const std::string& a, int64_t na, const std::string& b, int64_t nb);

}  // namespace traincache::train
