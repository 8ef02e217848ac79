#include "traincache/text/tokenizer.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>
#include <thread>

#include "tokenizer_internal.h"
#include "traincache/base/cores.h"
#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/base/json_input.h"
#include "traincache/base/module.h"

namespace traincache::text {

namespace {

// libtraincache_spm, the module that holds libsentencepiece (src/text/spm_shim.cpp), loaded once.
struct SpmModule {
  void* (*load)(const char*, std::size_t, char*, std::size_t) = nullptr;
  void (*free)(void*) = nullptr;
  int (*piece_size)(void*) = nullptr;
  int (*pad_id)(void*) = nullptr;
  int (*encode)(void*, const char*, std::size_t, void (*)(const int*, std::size_t, void*), void*, char*,
                std::size_t) = nullptr;

  static constexpr const char* kFile = "libtraincache_spm.so";

  static const SpmModule& get() {
    static const SpmModule m = open();
    return m;
  }

 private:
  static SpmModule open() {
    int flags = RTLD_NOW | RTLD_LOCAL;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    flags |= RTLD_DEEPBIND;  // its protobuf-lite binds to itself, not to LibTorch's libprotobuf
#endif
    void* h = open_module(kFile, "TRAINCACHE_SPM_MODULE", flags, "SentencePiece");
    SpmModule m;
    auto sym = [h](const char* name) { return module_symbol(h, name, kFile, "SentencePiece"); };
    m.load = reinterpret_cast<decltype(m.load)>(sym("tc_spm_load"));
    m.free = reinterpret_cast<decltype(m.free)>(sym("tc_spm_free"));
    m.piece_size = reinterpret_cast<decltype(m.piece_size)>(sym("tc_spm_piece_size"));
    m.pad_id = reinterpret_cast<decltype(m.pad_id)>(sym("tc_spm_pad_id"));
    m.encode = reinterpret_cast<decltype(m.encode)>(sym("tc_spm_encode"));
    return m;
  }
};

// A SentencePiece model: the ids sentencepiece's Encode gives (no BOS or EOS), as
// python3-sentencepiece's encode() does.
class SpmTokenizer : public Tokenizer {
 public:
  SpmTokenizer(const std::string& path, const std::string& bytes) : m_(SpmModule::get()) {
    char err[512] = "";
    sp_ = m_.load(bytes.data(), bytes.size(), err, sizeof err);
    if (!sp_) throw Error(Exit::data, path, std::string("not a valid SentencePiece model: ") + err);
  }
  ~SpmTokenizer() override { m_.free(sp_); }
  SpmTokenizer(const SpmTokenizer&) = delete;
  SpmTokenizer& operator=(const SpmTokenizer&) = delete;

  const char* kind() const override { return "sentencepiece"; }
  int64_t vocab_size() const override { return m_.piece_size(sp_); }
  int64_t pad_id() const override { return m_.pad_id(sp_) >= 0 ? m_.pad_id(sp_) : 0; }
  int64_t special_tokens() const override { return 0; }
  std::string describe() const override { return "sentencepiece, " + std::to_string(vocab_size()) + " pieces"; }

  Encoding encode(std::string_view text, int64_t max_length) const override {
    Encoding e;
    char err[512] = "";
    auto take = [](const int* ids, std::size_t n, void* ctx) { static_cast<Encoding*>(ctx)->ids.assign(ids, ids + n); };
    if (m_.encode(sp_, text.data(), text.size(), take, &e, err, sizeof err) != 0)
      throw Error(Exit::data, "sentencepiece", err);
    if (max_length > 0 && static_cast<int64_t>(e.ids.size()) > max_length) {
      e.ids.resize(static_cast<std::size_t>(max_length));
      e.truncated = true;
    }
    e.type_ids.assign(e.ids.size(), 0);
    return e;
  }

 private:
  const SpmModule& m_;
  void* sp_ = nullptr;
};

// The whole file; symbolic links followed (the Hugging Face hub cache links snapshots to blobs).
std::string read_tokenizer_file(const std::string& path) { return files::read_input(path); }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// sentence-transformers' max_seq_length, from the sentence_bert_config.json beside `tokenizer` (a
// model folder as SentenceTransformer.save writes it), or 0 when there is none.
int64_t folder_max_length(const std::string& tokenizer) {
  const auto slash = tokenizer.rfind('/');
  const std::string config =
      (slash == std::string::npos ? std::string() : tokenizer.substr(0, slash + 1)) + "sentence_bert_config.json";
  struct stat st;
  if (::stat(config.c_str(), &st) != 0) return 0;
  const nlohmann::json j = parse_json_input(files::read_input(config), config);
  if (j.is_discarded() || !j.is_object()) throw Error(Exit::data, config, "not a JSON object");
  if (!j.contains("max_seq_length") || j["max_seq_length"].is_null()) return 0;
  const auto& m = j["max_seq_length"];
  // A whole number written as a float (64.0, as some exporters write it) is a length too.
  const bool whole =
      m.is_number_integer() || (m.is_number_float() && std::isfinite(m.get<double>()) &&
                                std::floor(m.get<double>()) == m.get<double>() && std::fabs(m.get<double>()) < 9e15);
  const int64_t n = !whole ? 0 : m.is_number_integer() ? m.get<int64_t>() : static_cast<int64_t>(m.get<double>());
  if (n < 1)
    throw Error(Exit::data, config, "max_seq_length " + m.dump() + " is not a length (a whole number of tokens)");
  if (n > kMaxTextTokens)
    throw Error(Exit::data, config,
                "max_seq_length " + m.dump() + " is more than the " + std::to_string(kMaxTextTokens) +
                    " tokens a text may have (longer than any encoder's position table); give --max-length");
  return n;
}

}  // namespace

std::unique_ptr<Tokenizer> spm::load(const std::string& path, const std::string& bytes) {
  return std::make_unique<SpmTokenizer>(path, bytes);
}

void check_path(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw Error(Exit::usage, path, "is a directory; name its tokenizer.json (or the SentencePiece .model file)");
}

std::unique_ptr<Tokenizer> load(const std::string& path) {
  check_path(path);
  const std::string bytes = read_tokenizer_file(path);
  auto tok = ends_with(path, ".model") ? spm::load(path, bytes) : hf::load(path, bytes);
  try {
    tok->set_model_max_length(folder_max_length(path));
  } catch (const Error& e) {
    if (e.code() != Exit::data) throw;
    tok->set_model_max_error(e.what());  // refused only when no --max-length stands in for it
  }
  return tok;
}

const Choices<Padding>& padding_choices() {
  static const Choices<Padding> c{{Padding::longest, "longest"}, {Padding::max_length, "max-length"}};
  return c;
}

int64_t effective_max_length(const Tokenizer& tok, const TokenizeOptions& opts) {
  if (opts.max_length > 0 && opts.max_length < tok.special_tokens())
    throw Error(Exit::usage, "--max-length",
                std::to_string(opts.max_length) + " cannot hold the " + std::to_string(tok.special_tokens()) +
                    " special tokens the tokenizer adds to every text");
  const std::string most = "more than the " + std::to_string(kMaxTextTokens) +
                           " tokens a text may have (longer than any encoder's position table)";
  if (opts.max_length > kMaxTextTokens)
    throw Error(Exit::usage, "--max-length", std::to_string(opts.max_length) + " is " + most);
  if (opts.max_length > 0) return opts.max_length;
  if (!tok.model_max_error().empty()) throw Error(Exit::data, "", tok.model_max_error());
  if (tok.model_max_length() > 0) return std::max(tok.model_max_length(), tok.special_tokens());
  if (tok.file_max_length() > kMaxTextTokens)
    throw Error(Exit::data, "the tokenizer's truncation.max_length",
                std::to_string(tok.file_max_length()) + " is " + most + "; give --max-length");
  return tok.file_max_length() > 0 ? tok.file_max_length() : 512;
}

void TokenRows::append(const Encoding& e) {
  truncated += e.truncated ? 1 : 0;
  ids.insert(ids.end(), e.ids.begin(), e.ids.end());
  type_ids.insert(type_ids.end(), e.type_ids.begin(), e.type_ids.end());
  offsets.push_back(static_cast<int64_t>(ids.size()));
}

void TokenRows::extend(const TokenRows& more) {
  const int64_t base = static_cast<int64_t>(ids.size());
  ids.insert(ids.end(), more.ids.begin(), more.ids.end());
  type_ids.insert(type_ids.end(), more.type_ids.begin(), more.type_ids.end());
  for (std::size_t i = 1; i < more.offsets.size(); ++i) offsets.push_back(base + more.offsets[i]);
  truncated += more.truncated;
}

namespace {

// Text `row` of `what`, tokenized and cut at `max_length`: an empty one is refused, naming its row.
Encoding encode_text(const Tokenizer& tok, const std::string& text, int64_t max_length, const std::string& what,
                     int64_t row) {
  if (text.empty()) throw Error(Exit::data, what + " row " + std::to_string(row), "empty text");
  return tok.encode(text, max_length);
}

// texts[i], row row_of(i) of `what`, tokenized on `threads` threads (0: one per core; one for
// fewer than 512 texts), each a contiguous share, joined in order: the same rows, and the same
// first failing row's error, whatever the thread count.
template <class RowOf>
TokenRows encode_texts(const Tokenizer& tok, const std::vector<std::string>& texts, int64_t max_length,
                       const std::string& what, RowOf row_of, int threads) {
  const std::size_t n = texts.size();
  std::size_t parts = threads > 0 ? static_cast<std::size_t>(threads) : static_cast<std::size_t>(usable_cores());
  parts = std::max<std::size_t>(1, std::min(parts, n / 256));  // small inputs: one thread
  std::vector<TokenRows> part(parts);
  std::vector<std::exception_ptr> failed(parts);
  auto work = [&](std::size_t p) {
    try {
      for (std::size_t i = n * p / parts; i < n * (p + 1) / parts; ++i)
        part[p].append(encode_text(tok, texts[i], max_length, what, row_of(i)));
    } catch (...) {
      failed[p] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t p = 1; p < parts; ++p) pool.emplace_back(work, p);
  work(0);
  for (auto& t : pool) t.join();
  for (auto& f : failed)  // the first failing row's error, as one thread would have found it
    if (f) std::rethrow_exception(f);
  TokenRows out = std::move(part[0]);
  out.pad_id = tok.pad_id();
  for (std::size_t p = 1; p < parts; ++p) out.extend(part[p]);
  return out;
}

}  // namespace

TokenRows tokenize_rows(const Tokenizer& tok, const std::vector<std::string>& texts, const TokenizeOptions& opts,
                        const std::string& what, int threads) {
  return encode_texts(
      tok, texts, effective_max_length(tok, opts), what, [](std::size_t i) { return static_cast<int64_t>(i); },
      threads);
}

TokenRows token_rows(const std::vector<int64_t>& values, std::vector<int64_t> offsets, int64_t pad_id,
                     const std::string& what, int64_t first_row) {
  for (std::size_t i = 0; i < values.size(); ++i)
    if (values[i] < 0 || values[i] > INT32_MAX) {
      const auto row = std::upper_bound(offsets.begin(), offsets.end(), static_cast<int64_t>(i)) - offsets.begin() - 1;
      throw Error(Exit::data, what + " row " + std::to_string(first_row + row),
                  "token id " + std::to_string(values[i]) + " is not a vocabulary index");
    }
  TokenRows rows;
  rows.offsets = std::move(offsets);
  rows.ids.assign(values.begin(), values.end());
  rows.type_ids.assign(values.size(), 0);
  rows.pad_id = pad_id;
  return rows;
}

TokenBatch pad_seqs(const std::function<TokenSeq(int64_t)>& seq, const std::vector<int64_t>& seqs, int64_t length,
                    int64_t pad_id) {
  TokenBatch b;
  b.rows = static_cast<int64_t>(seqs.size());
  std::vector<TokenSeq> views;
  views.reserve(seqs.size());
  for (int64_t s : seqs) views.push_back(seq(s));
  b.length = length;
  if (length <= 0)
    for (const auto& v : views) b.length = std::max(b.length, v.length);
  b.length = std::max<int64_t>(b.length, 1);
  const std::size_t n = static_cast<std::size_t>(b.rows * b.length);
  b.input_ids.assign(n, pad_id);
  b.attention_mask.assign(n, 0);
  b.token_type_ids.assign(n, 0);
  for (std::size_t r = 0; r < views.size(); ++r) {
    const auto len = static_cast<std::size_t>(std::min(views[r].length, b.length));
    const std::size_t base = r * static_cast<std::size_t>(b.length);
    std::copy_n(views[r].ids, len, b.input_ids.begin() + static_cast<std::ptrdiff_t>(base));
    std::copy_n(views[r].type_ids, len, b.token_type_ids.begin() + static_cast<std::ptrdiff_t>(base));
    std::fill_n(b.attention_mask.begin() + static_cast<std::ptrdiff_t>(base), len, 1);
  }
  return b;
}

TokenBatch pad_rows(const TokenRows& rows, const std::vector<int64_t>& seqs, int64_t length) {
  return pad_seqs(
      [&rows](int64_t i) {
        const auto from = static_cast<std::size_t>(rows.offsets[static_cast<std::size_t>(i)]);
        return TokenSeq{rows.ids.data() + from, rows.type_ids.data() + from, rows.length(i)};
      },
      seqs, length, rows.pad_id);
}

TokenBatch tokenize_batch(const Tokenizer& tok, const std::vector<std::string>& texts, const TokenizeOptions& opts,
                          const std::string& what, int64_t first_row, const std::vector<int64_t>* row_numbers,
                          int threads) {
  const int64_t max_length = effective_max_length(tok, opts);
  auto row_of = [&](std::size_t i) { return row_numbers ? row_numbers->at(i) : first_row + static_cast<int64_t>(i); };
  const TokenRows rows = encode_texts(tok, texts, max_length, what, row_of, threads);
  std::vector<int64_t> all(texts.size());
  std::iota(all.begin(), all.end(), 0);
  TokenBatch b = pad_rows(rows, all, opts.padding == Padding::max_length ? max_length : 0);
  b.truncated = rows.truncated;
  return b;
}

namespace {
// The length of the well-formed UTF-8 sequence at s[i], or 0; `bad` gets the length of the maximal
// subpart to replace when it is 0 (Unicode's "U+FFFD substitution of maximal subparts").
std::size_t utf8_sequence(std::string_view s, std::size_t i, std::size_t& bad) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  bad = 1;
  if (b0 < 0x80) return 1;
  int n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF)
    n = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF)
    n = 3, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
  else if (b0 >= 0xF0 && b0 <= 0xF4)
    n = 4, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
  else
    return 0;
  for (int k = 1; k < n; ++k) {
    if (i + k >= s.size()) return 0;
    const auto c = static_cast<unsigned char>(s[i + k]);
    if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return 0;
    bad = k + 1;
  }
  return n;
}
}  // namespace

std::size_t first_invalid_utf8(std::string_view s) {
  for (std::size_t i = 0, bad = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i, bad);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

int64_t repair_utf8(std::string& s, std::string_view replacement) {
  if (first_invalid_utf8(s) == std::string_view::npos) return 0;
  std::string out;
  out.reserve(s.size() + 8);
  int64_t replaced = 0;
  for (std::size_t i = 0, bad = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i, bad);
    if (n > 0) {
      out.append(s, i, n);
      i += n;
    } else {
      out += replacement;
      ++replaced;
      i += bad;
    }
  }
  s = std::move(out);
  return replaced;
}

}  // namespace traincache::text
