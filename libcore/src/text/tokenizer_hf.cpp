// Hugging Face tokenizer.json: the pipeline added tokens -> normalizer -> pre-tokenizer -> model
// -> post-processor, with the semantics of the Rust `tokenizers` crate (docs/text.md lists the
// components and where Tokenizers.js, the parity reference, differs).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "tokenizer_internal.h"
#include "traincache/base/error.h"
#include "traincache/base/json_input.h"
#include "traincache/base/json_text.h"
#include "unicode_text.h"

namespace traincache::text {

namespace {

using nlohmann::json;

[[noreturn]] void unsupported(const std::string& path, const std::string& what) {
  throw Error(Exit::data, path, "unsupported tokenizer component: " + what);
}

// "A+B+C": the descriptions of a sequence's parts.
template <class Part>
std::string joined(const std::vector<std::unique_ptr<Part>>& parts) {
  std::string d;
  for (const auto& p : parts) d += (d.empty() ? "" : "+") + p->describe();
  return d;
}

// Drops White_Space from the start and/or the end of `s`.
void trim_whitespace(std::string& s, bool left, bool right) {
  std::u32string c = uni::decode(s);
  std::size_t a = 0, b = c.size();
  while (left && a < b && uni::is_whitespace(c[a])) ++a;
  while (right && b > a && uni::is_whitespace(c[b - 1])) --b;
  s = uni::encode(c.substr(a, b - a));
}

// ---- normalizers ------------------------------------------------------------------------------

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(std::string& s) const = 0;
  virtual std::string describe() const = 0;
};

// Lowercases code point by code point (Rust's NormalizedString::lowercase).
void lowercase(std::string& s) {
  if (uni::is_ascii(s)) {
    for (char& c : s)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    return;
  }
  std::u32string out;
  for (char32_t c : uni::decode(s)) uni::append_lowercase(c, out);
  s = uni::encode(out);
}

// Drops the code points `drop` holds for.
template <class Pred>
void filter(std::string& s, Pred drop) {
  std::u32string out;
  for (char32_t c : uni::decode(s))
    if (!drop(c)) out += c;
  s = uni::encode(out);
}

// BERT's: clean text (drop NUL, U+FFFD and controls, whitespace -> ' '), spaces around CJK
// ideographs, strip accents (NFD, drop Mn), lowercase; in that order.
class BertNormalizer : public Normalizer {
 public:
  explicit BertNormalizer(const json& j) {
    clean_ = j.value("clean_text", true);
    chinese_ = j.value("handle_chinese_chars", true);
    lower_ = j.value("lowercase", true);
    strip_ = j.contains("strip_accents") && !j["strip_accents"].is_null() ? j["strip_accents"].get<bool>() : lower_;
  }
  void apply(std::string& s) const override {
    if (clean_ || chinese_) {
      std::u32string out;
      for (char32_t c : uni::decode(s)) {
        if (clean_) {
          // Controls go first (all but tab, LF and CR), so VT, FF and NEL are dropped, not spaces.
          const bool tab_or_eol = c == '\t' || c == '\n' || c == '\r';
          if (c == 0 || c == 0xFFFD || (!tab_or_eol && uni::is_other(c))) continue;
          if (tab_or_eol || uni::is_whitespace(c)) {
            out += U' ';
            continue;
          }
        }
        if (chinese_ && is_chinese(c)) {
          out += U' ';
          out += c;
          out += U' ';
        } else {
          out += c;
        }
      }
      s = uni::encode(out);
    }
    if (strip_ && !uni::is_ascii(s)) {
      s = uni::normalize(s, uni::Form::nfd);
      filter(s, uni::is_nonspacing_mark);
    }
    if (lower_) lowercase(s);
  }
  std::string describe() const override {
    std::string d = "BertNormalizer(";
    for (auto [on, name] : {std::pair{clean_, "clean_text"},
                            {chinese_, "chinese_chars"},
                            {strip_, "strip_accents"},
                            {lower_, "lowercase"}})
      if (on) d += std::string(d.back() == '(' ? "" : ",") + name;
    return d + ")";
  }

 private:
  // The CJK Unified Ideograph blocks BERT puts spaces around.
  static bool is_chinese(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
  }
  bool clean_, chinese_, lower_, strip_;
};

class SimpleNormalizer : public Normalizer {
 public:
  SimpleNormalizer(std::string type, const json& j) : type_(std::move(type)) {
    if (type_ == "Strip") {
      left_ = j.value("strip_left", true);
      right_ = j.value("strip_right", true);
    }
  }
  void apply(std::string& s) const override {
    if (type_ == "Lowercase") return lowercase(s);
    if (type_ == "StripAccents") return filter(s, uni::is_mark);
    if (type_ == "Strip") return trim_whitespace(s, left_, right_);
    static const std::map<std::string, uni::Form> forms{
        {"NFC", uni::Form::nfc}, {"NFD", uni::Form::nfd}, {"NFKC", uni::Form::nfkc}, {"NFKD", uni::Form::nfkd}};
    s = uni::normalize(s, forms.at(type_));
  }
  std::string describe() const override { return type_; }

 private:
  std::string type_;
  bool left_ = true, right_ = true;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void apply(std::string& s) const override {
    for (const auto& p : parts_) p->apply(s);
  }
  std::string describe() const override { return joined(parts_); }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& path) {
  if (j.is_null()) return nullptr;
  const std::string type = j.value("type", "");
  if (type == "BertNormalizer") return std::make_unique<BertNormalizer>(j);
  if (type == "Lowercase" || type == "StripAccents" || type == "Strip" || type == "NFC" || type == "NFD" ||
      type == "NFKC" || type == "NFKD")
    return std::make_unique<SimpleNormalizer>(type, j);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& n : j.at("normalizers"))
      if (auto p = make_normalizer(n, path)) parts.push_back(std::move(p));
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  unsupported(path, "normalizer " + (type.empty() ? json_text(j) : type));
}

// ---- pre-tokenizers ---------------------------------------------------------------------------

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits every piece further.
  virtual void split(std::vector<std::string>& pieces) const = 0;
  virtual std::string describe() const = 0;
};

// Whitespace removed, punctuation isolated (BERT's basic tokenizer); or whitespace only.
class BertPreTokenizer : public PreTokenizer {
 public:
  explicit BertPreTokenizer(bool punctuation) : punct_(punctuation) {}
  void split(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    for (const auto& p : pieces) {
      std::string cur;
      for (char32_t c : uni::decode(p)) {
        if (uni::is_whitespace(c)) {
          if (!cur.empty()) out.push_back(std::move(cur));
          cur.clear();
        } else if (punct_ && is_bert_punctuation(c)) {
          if (!cur.empty()) out.push_back(std::move(cur));
          cur.clear();
          uni::append_utf8(c, cur);
          out.push_back(std::move(cur));
          cur.clear();
        } else {
          uni::append_utf8(c, cur);
        }
      }
      if (!cur.empty()) out.push_back(std::move(cur));
    }
    pieces = std::move(out);
  }
  std::string describe() const override { return punct_ ? "BertPreTokenizer" : "WhitespaceSplit"; }

 private:
  static bool is_bert_punctuation(char32_t c) {
    if (c < 0x80)
      return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
             (c >= 0x7B && c <= 0x7E);
    return uni::is_punctuation(c);
  }
  bool punct_;
};

// A compiled PCRE2 pattern (UTF, Unicode properties, JIT).
class Regex {
 public:
  Regex(const std::string& pattern, const std::string& path) {
    int err = 0;
    PCRE2_SIZE at = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                          &at, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw Error(Exit::data, path, "regex '" + pattern + "': " + reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is unavailable
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The non-empty matches of `s` (valid UTF-8), left to right, as [begin, end) byte offsets.
  std::vector<std::pair<std::size_t, std::size_t>> matches(const std::string& s) const {
    std::vector<std::pair<std::size_t, std::size_t>> out;
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
    std::size_t pos = 0;
    while (pos < s.size()) {
      int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, PCRE2_NO_UTF_CHECK, md.get(),
                           nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      if (ov[1] == ov[0]) {  // an empty match: step over one code point
        pos = ov[0] + 1;
        while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
        continue;
      }
      out.emplace_back(ov[0], ov[1]);
      pos = ov[1];
    }
    return out;
  }

 private:
  pcre2_code* code_ = nullptr;
};

// GPT-2's byte-level pre-tokenizer: the GPT-2 split pattern, then every byte of each piece as one
// of 256 printable code points. \s in the pattern is Unicode's White_Space, as Oniguruma reads it.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(const json& j, const std::string& path)
      : prefix_space_(j.value("add_prefix_space", true)),
        use_regex_(j.value("use_regex", true)),
        regex_(pattern(), path) {
    byte_chars_ = byte_to_unicode();
  }
  void split(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    for (auto& p : pieces) {
      if (prefix_space_ && (p.empty() || p[0] != ' ')) p.insert(p.begin(), ' ');
      if (!use_regex_) {
        out.push_back(map_bytes(p));
        continue;
      }
      for (auto [a, b] : regex_.matches(p)) out.push_back(map_bytes(p.substr(a, b - a)));
    }
    pieces = std::move(out);
  }
  std::string describe() const override {
    return std::string("ByteLevel(") + (prefix_space_ ? "add_prefix_space" : "") + ")";
  }

  // Byte b is shown as: itself when printable Latin-1 (! to ~, ¡ to ¬, ® to ÿ), else 256 + n for
  // the n-th byte that is not.
  static std::vector<std::string> byte_to_unicode() {
    std::vector<std::string> m(256);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool shown = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      uni::append_utf8(shown ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++), m[b]);
    }
    return m;
  }

 private:
  static std::string pattern() {
    const std::string ws = "\\x{9}-\\x{d}\\x{85}\\p{Z}";
    return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + ws + "\\p{L}\\p{N}]+|[" + ws + "]+(?![^" + ws + "])|[" +
           ws + "]+";
  }
  std::string map_bytes(const std::string& s) const {
    std::string out;
    for (unsigned char c : s) out += byte_chars_[c];
    return out;
  }
  bool prefix_space_, use_regex_;
  Regex regex_;
  std::vector<std::string> byte_chars_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(std::vector<std::string>& pieces) const override {
    for (const auto& p : parts_) p->split(pieces);
  }
  std::string describe() const override { return joined(parts_); }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& path) {
  if (j.is_null()) return nullptr;
  const std::string type = j.value("type", "");
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>(true);
  if (type == "WhitespaceSplit") return std::make_unique<BertPreTokenizer>(false);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(j, path);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& p : j.at("pretokenizers"))
      if (auto t = make_pre_tokenizer(p, path)) parts.push_back(std::move(t));
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  unsupported(path, "pre_tokenizer " + (type.empty() ? json_text(j) : type));
}

// ---- post-processors --------------------------------------------------------------------------

// The special tokens around a single sequence, and their type ids.
struct PostProcessor {
  std::vector<int64_t> before, after;
  std::vector<int64_t> before_types, after_types;
  int64_t sequence_type = 0;
  std::string name = "none";

  int64_t added() const { return static_cast<int64_t>(before.size() + after.size()); }
};

void parse_template(const json& j, const std::string& path, PostProcessor& pp) {
  bool seen_a = false;
  for (const auto& item : j.at("single")) {
    if (item.contains("Sequence")) {
      if (item["Sequence"].value("id", "A") != "A") unsupported(path, "TemplateProcessing single with $B");
      seen_a = true;
      pp.sequence_type = item["Sequence"].value("type_id", 0);
      continue;
    }
    const json& st = item.at("SpecialToken");
    const std::string name = st.at("id").get<std::string>();
    if (!j.at("special_tokens").contains(name))
      throw Error(Exit::data, path, "TemplateProcessing: special token '" + name + "' is not in special_tokens");
    for (const auto& id : j["special_tokens"][name].at("ids")) {
      (seen_a ? pp.after : pp.before).push_back(id.get<int64_t>());
      (seen_a ? pp.after_types : pp.before_types).push_back(st.value("type_id", 0));
    }
  }
}

void parse_post_processor(const json& j, const std::string& path, PostProcessor& pp) {
  if (j.is_null()) return;
  const std::string type = j.value("type", "");
  if (type == "TemplateProcessing") {
    parse_template(j, path, pp);
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    pp.before = {j.at("cls").at(1).get<int64_t>()};
    pp.after = {j.at("sep").at(1).get<int64_t>()};
    pp.before_types = pp.after_types = {0};
  } else if (type == "ByteLevel") {
    // offsets only: ids unchanged
  } else if (type == "Sequence") {
    for (const auto& p : j.at("processors")) parse_post_processor(p, path, pp);
    pp.name = "Sequence";
    return;
  } else {
    unsupported(path, "post_processor " + (type.empty() ? json_text(j) : type));
  }
  if (pp.name == "none" || type != "ByteLevel") pp.name = type;
}

// ---- added tokens ------------------------------------------------------------------------------

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool special = false, normalized = false, lstrip = false, rstrip = false;
};

// Finds added tokens in text, leftmost and longest first (as the Rust crate's Aho-Corasick
// matcher), and trims the whitespace lstrip/rstrip tokens take.
class AddedSplitter {
 public:
  void add(const AddedToken* t) {
    if (!t->content.empty()) by_first_[static_cast<unsigned char>(t->content[0])].push_back(t);
  }
  void finish() {
    for (auto& [k, v] : by_first_)
      std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->content.size() > b->content.size(); });
  }
  bool empty() const { return by_first_.empty(); }

  // Sections of `s`: text (token null) or an added token.
  std::vector<std::pair<std::string, const AddedToken*>> split(const std::string& s) const {
    std::vector<std::pair<std::string, const AddedToken*>> out;
    std::size_t start = 0;
    for (std::size_t i = 0; i < s.size();) {
      const AddedToken* hit = match_at(s, i);
      if (!hit) {
        ++i;
        continue;
      }
      if (i > start) out.emplace_back(s.substr(start, i - start), nullptr);
      out.emplace_back(hit->content, hit);
      i += hit->content.size();
      start = i;
    }
    if (start < s.size()) out.emplace_back(s.substr(start), nullptr);
    for (std::size_t k = 0; k < out.size(); ++k) {
      if (!out[k].second) continue;
      if (out[k].second->lstrip && k > 0 && !out[k - 1].second) trim_whitespace(out[k - 1].first, false, true);
      if (out[k].second->rstrip && k + 1 < out.size() && !out[k + 1].second)
        trim_whitespace(out[k + 1].first, true, false);
    }
    return out;
  }

 private:
  const AddedToken* match_at(const std::string& s, std::size_t i) const {
    auto it = by_first_.find(static_cast<unsigned char>(s[i]));
    if (it == by_first_.end()) return nullptr;
    for (const AddedToken* t : it->second)
      if (s.compare(i, t->content.size(), t->content) == 0) return t;
    return nullptr;
  }
  std::map<unsigned char, std::vector<const AddedToken*>> by_first_;
};

// ---- the tokenizer -----------------------------------------------------------------------------

class HfTokenizer : public Tokenizer {
 public:
  HfTokenizer(const json& j, const std::string& path) {
    for (const auto& a : j.value("added_tokens", json::array())) {
      AddedToken t;
      t.content = a.at("content").get<std::string>();
      t.id = a.at("id").get<int64_t>();
      t.special = a.value("special", false);
      t.normalized = a.value("normalized", !t.special);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      added_.push_back(t);
    }
    std::map<std::string, int64_t> added_ids;
    for (const auto& t : added_) added_ids[t.content] = t.id;
    normalizer_ = make_normalizer(j.value("normalizer", json()), path);
    pre_ = make_pre_tokenizer(j.value("pre_tokenizer", json()), path);
    model_ = hf::make_model(j.at("model"), path);
    parse_post_processor(j.value("post_processor", json()), path, post_);
    // A normalized token is matched in normalized text, by its normalized content.
    for (const auto& t : added_) {
      if (!normalizer_ || !t.normalized) {
        raw_.add(&t);
        continue;
      }
      normalized_contents_.push_back(t);
      normalizer_->apply(normalized_contents_.back().content);
    }
    for (const auto& t : normalized_contents_) normalized_.add(&t);
    raw_.finish();
    normalized_.finish();
    vocab_ = model_->vocab_size();
    for (const auto& t : added_) vocab_ = std::max(vocab_, t.id + 1);
    pad_ = pad_id_of(j, added_ids);
    if (j.contains("truncation") && j["truncation"].is_object() && j["truncation"].contains("max_length")) {
      const json& m = j["truncation"]["max_length"];
      if (!m.is_number_integer() || m.get<int64_t>() < post_.added() || m.get<int64_t>() < 1)
        throw Error(Exit::data, path,
                    "truncation.max_length " + json_text(m) + " is not a length (a whole number of tokens, at least " +
                        std::to_string(std::max<int64_t>(1, post_.added())) + ")");
      file_max_ = m.get<int64_t>();
    }
    for (int64_t id : post_.before) check_id(id, path);
    for (int64_t id : post_.after) check_id(id, path);
  }

  const char* kind() const override { return model_->kind(); }
  int64_t vocab_size() const override { return vocab_; }
  int64_t pad_id() const override { return pad_; }
  int64_t special_tokens() const override { return post_.added(); }
  int64_t file_max_length() const override { return file_max_; }
  std::string describe() const override {
    return std::string(kind()) + ", " + std::to_string(vocab_) + " tokens, " +
           (normalizer_ ? normalizer_->describe() : "no normalizer") + ", " +
           (pre_ ? pre_->describe() : "no pre-tokenizer") + ", " + post_.name;
  }

  Encoding encode(std::string_view text, int64_t max_length) const override {
    Encoding e;
    std::vector<int64_t> content;
    for (auto& [section, token] : raw_.split(std::string(text))) {
      if (token) {
        content.push_back(token->id);
        continue;
      }
      std::string s = section;
      if (normalizer_) normalizer_->apply(s);
      for (auto& [sub, tok] : normalized_.split(s)) {
        if (tok) {
          content.push_back(tok->id);
          continue;
        }
        if (sub.empty()) continue;
        std::vector<std::string> pieces{sub};
        if (pre_) pre_->split(pieces);
        for (const auto& p : pieces) model_->tokenize(p, content);
      }
    }
    // Room for content beside the special tokens: none when max_length cannot hold even those
    // (effective_max_length refuses such a --max-length; a direct caller gets the specials alone).
    const int64_t room = std::max<int64_t>(0, max_length - post_.added());
    if (max_length > 0 && static_cast<int64_t>(content.size()) > room) {
      content.resize(static_cast<std::size_t>(room));
      e.truncated = true;
    }
    e.ids = post_.before;
    e.ids.insert(e.ids.end(), content.begin(), content.end());
    e.ids.insert(e.ids.end(), post_.after.begin(), post_.after.end());
    e.type_ids = post_.before_types;
    e.type_ids.insert(e.type_ids.end(), content.size(), post_.sequence_type);
    e.type_ids.insert(e.type_ids.end(), post_.after_types.begin(), post_.after_types.end());
    return e;
  }

 private:
  void check_id(int64_t id, const std::string& path) const {
    if (id < 0 || id >= vocab_)
      throw Error(Exit::data, path,
                  "post_processor: special token id " + std::to_string(id) + " is outside the vocabulary");
  }
  static int64_t pad_id_of(const json& j, const std::map<std::string, int64_t>& added) {
    if (j.contains("padding") && j["padding"].is_object() && j["padding"].contains("pad_id"))
      return j["padding"]["pad_id"].get<int64_t>();
    for (const char* name : {"[PAD]", "<pad>"})
      if (auto it = added.find(name); it != added.end()) return it->second;
    return 0;
  }

  std::vector<AddedToken> added_, normalized_contents_;
  AddedSplitter raw_, normalized_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<hf::Model> model_;
  PostProcessor post_;
  int64_t vocab_ = 0, pad_ = 0, file_max_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> hf::load(const std::string& path, const std::string& bytes) {
  json j = parse_json_input(bytes, path);
  if (j.is_discarded()) throw Error(Exit::data, path, "not a valid tokenizer.json: invalid JSON");
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    throw Error(Exit::data, path, "not a tokenizer.json: no \"model\" object");
  try {
    return std::make_unique<HfTokenizer>(j, path);
  } catch (const json::exception& e) {
    throw Error(Exit::data, path, std::string("not a valid tokenizer.json: ") + e.what());
  }
}

}  // namespace traincache::text
