// The parts of the tokenizers that tokenizer.cpp dispatches to. Private to libcore.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "traincache/text/tokenizer.h"

namespace traincache::text {

namespace hf {

/// A tokenizer.json model: one pre-tokenized word -> ids.
class Model {
 public:
  virtual ~Model() = default;
  /// "wordpiece" or "bpe".
  virtual const char* kind() const = 0;
  /// One more than the largest id of the vocabulary.
  virtual int64_t vocab_size() const = 0;
  /// Appends the ids of `word` to `ids`.
  virtual void tokenize(const std::string& word, std::vector<int64_t>& ids) const = 0;
};

/// The model section of a tokenizer.json (WordPiece or BPE); Error(data) naming what is not
/// supported.
std::unique_ptr<Model> make_model(const nlohmann::json& j, const std::string& path);

/// Parses a tokenizer.json held in `bytes`.
std::unique_ptr<Tokenizer> load(const std::string& path, const std::string& bytes);

}  // namespace hf

namespace spm {
/// Loads a SentencePiece .model file held in `bytes`.
std::unique_ptr<Tokenizer> load(const std::string& path, const std::string& bytes);
}  // namespace spm

}  // namespace traincache::text
