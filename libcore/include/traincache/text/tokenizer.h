// Tokenizers loaded from the files users have: Hugging Face tokenizer.json (the WordPiece family
// and byte-level BPE) and SentencePiece .model files; and the padded int64 batches an encoder is
// fed (input_ids, attention_mask, token_type_ids). Torch-free; docs/text.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "traincache/base/choices.h"

namespace traincache::text {

/// One text's tokens, special tokens included, and the segment (type) id of each.
struct Encoding {
  std::vector<int64_t> ids;
  std::vector<int64_t> type_ids;
  bool truncated = false;  ///< the text had more tokens than max_length let through
};

/// A loaded tokenizer. encode() is const and safe to call from several threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// "wordpiece", "bpe" or "sentencepiece".
  virtual const char* kind() const = 0;
  /// Ids are in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  /// The id padding positions hold (attention_mask 0 there): the file's padding id, its [PAD] or
  /// <pad> token, else 0.
  virtual int64_t pad_id() const = 0;
  /// Tokens the post-processor adds to a single text ([CLS] and [SEP]: 2).
  virtual int64_t special_tokens() const = 0;
  /// The tokenizer file's own maximum length (its truncation section), or 0.
  virtual int64_t file_max_length() const { return 0; }
  /// The model folder's limit: sentence-transformers' `max_seq_length` in the
  /// sentence_bert_config.json beside the tokenizer file (what SentenceTransformer.encode cuts
  /// texts at), or 0. load() reads it.
  int64_t model_max_length() const { return model_max_; }
  void set_model_max_length(int64_t n) { model_max_ = n; }
  /// Why the model folder's limit could not be read (a malformed sentence_bert_config.json), or
  /// "": effective_max_length refuses it (Error(data)) only when no --max-length
  /// stands in for it.
  const std::string& model_max_error() const { return model_max_error_; }
  void set_model_max_error(const std::string& why) { model_max_error_ = why; }
  /// A one-line description: "wordpiece, 30522 tokens, BertNormalizer(lowercase), ...".
  virtual std::string describe() const = 0;

  /// The tokens of `text` (valid UTF-8), the content truncated so that the whole sequence with
  /// its special tokens holds at most `max_length` tokens (0: no limit), as Hugging Face
  /// tokenizers truncate a single sequence (right side, no stride).
  virtual Encoding encode(std::string_view text, int64_t max_length) const = 0;

 private:
  int64_t model_max_ = 0;
  std::string model_max_error_;
};

/// Loads a tokenizer: a file ending in .model is a SentencePiece model, anything else a Hugging
/// Face tokenizer.json. Missing file -> Error(no_input); invalid or unsupported (the component
/// named) -> Error(data). A sentence_bert_config.json beside it gives model_max_length() (a
/// max_seq_length that is not a positive whole number -> Error(data) naming that file).
std::unique_ptr<Tokenizer> load(const std::string& path);

/// What load() refuses before it reads: a directory given for the file -> Error(usage).
void check_path(const std::string& path);

/// How a batch is padded (--padding): to its longest sequence, or always to max_length.
enum class Padding { longest, max_length };
const Choices<Padding>& padding_choices();

/// What turns texts into an encoder's inputs (part of a cache's fingerprint).
struct TokenizeOptions {
  int64_t max_length = 0;  ///< 0 = the model folder's, else the tokenizer file's, else 512
  Padding padding = Padding::longest;
  bool strict_utf8 = false;  ///< refuse invalid UTF-8 instead of replacing it with U+FFFD
  int64_t pad_id = 0;        ///< token sequences read as stored (no tokenizer): their padding id
  /// The encoder's token embedding table by module path ("" = the smallest nn.Embedding holding
  /// the tokenizer's vocabulary; "none" = no vocabulary check).
  std::string vocab_table;
};

/// The most tokens a text may have (--max-length, a model folder's max_seq_length, a tokenizer's
/// truncation): 65,536, past the position table of every encoder model there is; a length of
/// 2,000,000 made batches of 256 such rows before anything refused it, and the kernel ended the run.
inline constexpr int64_t kMaxTextTokens = 65536;

/// The max_length used: `opts.max_length`, else the model folder's (sentence-transformers'
/// max_seq_length), else the tokenizer file's, else 512. More than kMaxTextTokens: Error(usage)
/// for --max-length, Error(data) for the tokenizer file's.
int64_t effective_max_length(const Tokenizer& tok, const TokenizeOptions& opts);

/// Padded token batches, row-major [rows, length], int64.
struct TokenBatch {
  int64_t rows = 0, length = 0;
  int64_t truncated = 0;  ///< texts cut at max_length (tokenize_batch)
  std::vector<int64_t> input_ids, attention_mask, token_type_ids;
};

/// Tokenizes and pads `texts` (each valid UTF-8), rows first_row... of `what` (or, when `rows` is
/// given, rows (*rows)[i]: texts gathered from anywhere in it). An empty text ->
/// Error(data, "<what> row N", "empty text"). On `threads` threads (0: one per core) as
/// tokenize_rows: the same result whatever the count.
TokenBatch tokenize_batch(const Tokenizer& tok, const std::vector<std::string>& texts, const TokenizeOptions& opts,
                          const std::string& what, int64_t first_row = 0, const std::vector<int64_t>* rows = nullptr,
                          int threads = 1);

/// Many texts' tokens, end to end: sequence i is [offsets[i], offsets[i+1]) of ids and type_ids.
/// Kept unpadded so that each batch (or chunk) is padded only to its own longest sequence.
struct TokenRows {
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> ids, type_ids;
  int64_t pad_id = 0;
  int64_t truncated = 0;  ///< texts cut at max_length

  int64_t size() const { return static_cast<int64_t>(offsets.size()) - 1; }
  int64_t length(int64_t i) const {
    return offsets[static_cast<std::size_t>(i) + 1] - offsets[static_cast<std::size_t>(i)];
  }
  void append(const Encoding& e);
  /// Appends every sequence of `more` after this one's.
  void extend(const TokenRows& more);
};

/// Tokenizes every text of `texts` (as tokenize_batch, truncated to effective_max_length) on
/// `threads` threads (0: one per core); the result does not depend on the thread count.
TokenRows tokenize_rows(const Tokenizer& tok, const std::vector<std::string>& texts, const TokenizeOptions& opts,
                        const std::string& what, int threads = 1);

/// Token sequences read as stored (a ragged column's int64 values and row offsets, rows
/// first_row... of `what`) as TokenRows padded with `pad_id`. A value that is not a vocabulary
/// index (negative, or beyond int32) -> Error(data, "<what> row N").
TokenRows token_rows(const std::vector<int64_t>& values, std::vector<int64_t> offsets, int64_t pad_id,
                     const std::string& what, int64_t first_row = 0);

/// Sequences `seqs` of `rows` (in that order, repeats allowed) padded to `length` tokens, or to
/// the longest of them when `length` is 0 (at least 1 token).
TokenBatch pad_rows(const TokenRows& rows, const std::vector<int64_t>& seqs, int64_t length = 0);

/// One sequence's tokens, wherever they are kept (TokenRows, a shared-memory slab).
struct TokenSeq {
  const int32_t* ids = nullptr;
  const int32_t* type_ids = nullptr;
  int64_t length = 0;
};

/// As pad_rows, for sequences `seq(i)` padded with `pad_id`.
TokenBatch pad_seqs(const std::function<TokenSeq(int64_t)>& seq, const std::vector<int64_t>& seqs, int64_t length,
                    int64_t pad_id);

/// Replaces every ill-formed UTF-8 sequence of `s` with U+FFFD (one per maximal subpart, as
/// WHATWG and Python's "replace" do), or with `replacement`, in place; returns how many were
/// replaced.
int64_t repair_utf8(std::string& s, std::string_view replacement = "\xEF\xBF\xBD");

/// The byte offset of the first ill-formed UTF-8 sequence of `s`, or npos.
std::size_t first_invalid_utf8(std::string_view s);

}  // namespace traincache::text
