// tokenizer.json models: WordPiece (greedy longest match, "##" continuations) and BPE (merges by
// rank, leftmost first, as the Rust crate applies them).
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <unordered_map>

#include "tokenizer_internal.h"
#include "traincache/base/error.h"
#include "traincache/base/json_text.h"

namespace traincache::text::hf {

namespace {

using nlohmann::json;
using Vocab = std::unordered_map<std::string, int64_t>;

Vocab read_vocab(const json& j, const std::string& path, int64_t& size) {
  if (!j.contains("vocab") || !j["vocab"].is_object())
    throw Error(Exit::data, path, "model: \"vocab\" must be an object of token -> id");
  Vocab v;
  size = 0;
  for (const auto& [tok, id] : j["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0)
      throw Error(Exit::data, path, "model: vocab id of '" + tok + "' is not a non-negative integer");
    v.emplace(tok, id.get<int64_t>());
    size = std::max(size, id.get<int64_t>() + 1);
  }
  if (v.empty()) throw Error(Exit::data, path, "model: empty vocabulary");
  return v;
}

// Byte offsets where the code points of valid UTF-8 `s` start, and s.size() at the end.
std::vector<std::size_t> char_bounds(const std::string& s) {
  std::vector<std::size_t> b;
  b.reserve(s.size() + 1);
  for (std::size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) b.push_back(i);
  b.push_back(s.size());
  return b;
}

class WordPiece : public Model {
 public:
  WordPiece(const json& j, const std::string& path) {
    vocab_ = read_vocab(j, path, size_);
    prefix_ = j.value("continuing_subword_prefix", "##");
    // Hugging Face's own loader refuses anything but a non-negative integer here (a usize).
    const json& m = j.contains("max_input_chars_per_word") ? j.at("max_input_chars_per_word") : json(100);
    if (!m.is_number_integer() || m.get<int64_t>() < 0)
      throw Error(Exit::data, path,
                  "WordPiece: max_input_chars_per_word " + json_text(m) + " is not a count of characters");
    max_chars_ = m.get<std::size_t>();
    const std::string unk = j.value("unk_token", "[UNK]");
    auto it = vocab_.find(unk);
    if (it == vocab_.end())
      throw Error(Exit::data, path, "WordPiece: unk_token '" + unk + "' is not in the vocabulary");
    unk_ = it->second;
  }
  const char* kind() const override { return "wordpiece"; }
  int64_t vocab_size() const override { return size_; }

  void tokenize(const std::string& word, std::vector<int64_t>& ids) const override {
    const std::vector<std::size_t> b = char_bounds(word);
    const std::size_t n = b.size() - 1;
    if (n > max_chars_) {
      ids.push_back(unk_);
      return;
    }
    const std::size_t mark = ids.size();
    std::string candidate;
    for (std::size_t start = 0; start < n;) {
      std::size_t end = n;
      int64_t found = -1;
      for (; start < end; --end) {
        candidate.assign(start > 0 ? prefix_ : std::string());
        candidate.append(word, b[start], b[end] - b[start]);
        if (auto it = vocab_.find(candidate); it != vocab_.end()) {
          found = it->second;
          break;
        }
      }
      if (found < 0) {  // no piece matches: the whole word is unknown
        ids.resize(mark);
        ids.push_back(unk_);
        return;
      }
      ids.push_back(found);
      start = end;
    }
  }

 private:
  Vocab vocab_;
  std::string prefix_;
  std::size_t max_chars_ = 100;
  int64_t unk_ = 0, size_ = 0;
};

class Bpe : public Model {
 public:
  Bpe(const json& j, const std::string& path) {
    vocab_ = read_vocab(j, path, size_);
    for (const char* opt : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (j.contains(opt) && !j[opt].is_null() && !j[opt].get<std::string>().empty())
        throw Error(Exit::data, path, std::string("unsupported tokenizer component: BPE option ") + opt);
    if (j.contains("dropout") && !j["dropout"].is_null() && j["dropout"].get<double>() > 0)
      throw Error(Exit::data, path, "BPE dropout is random; a cache needs deterministic tokens (set it to null)");
    if (j.contains("unk_token") && j["unk_token"].is_string()) {
      auto it = vocab_.find(j["unk_token"].get<std::string>());
      if (it == vocab_.end())
        throw Error(Exit::data, path,
                    "BPE: unk_token '" + j["unk_token"].get<std::string>() + "' is not in the vocabulary");
      unk_ = it->second;
    }
    fuse_unk_ = j.value("fuse_unk", false);
    byte_fallback_ = j.value("byte_fallback", false);
    ignore_merges_ = j.value("ignore_merges", false);
    read_merges(j, path);
  }
  const char* kind() const override { return "bpe"; }
  int64_t vocab_size() const override { return size_; }

  void tokenize(const std::string& word, std::vector<int64_t>& ids) const override {
    if (ignore_merges_)
      if (auto it = vocab_.find(word); it != vocab_.end()) return ids.push_back(it->second);
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (auto it = cache_.find(word); it != cache_.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int64_t> out = merge(initial_symbols(word));
    ids.insert(ids.end(), out.begin(), out.end());
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheWords && word.size() < 256) cache_.emplace(word, std::move(out));
  }

 private:
  static constexpr std::size_t kCacheWords = 10000;
  static uint64_t key(int64_t a, int64_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b); }

  void read_merges(const json& j, const std::string& path) {
    if (!j.contains("merges") || !j["merges"].is_array()) throw Error(Exit::data, path, "BPE: no \"merges\" list");
    int32_t rank = 0;
    for (const auto& m : j["merges"]) {
      std::string a, b;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const std::size_t sp = s.find(' ');
        if (sp == std::string::npos) throw Error(Exit::data, path, "BPE: merge '" + s + "' is not two tokens");
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2) {
        a = m[0].get<std::string>(), b = m[1].get<std::string>();
      } else {
        throw Error(Exit::data, path, "BPE: a merge is neither \"a b\" nor [a, b]");
      }
      auto ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(a + b);
      if (ia == vocab_.end() || ib == vocab_.end() || im == vocab_.end())
        throw Error(Exit::data, path, "BPE: merge '" + a + " " + b + "' uses a token that is not in the vocabulary");
      merges_.emplace(key(ia->second, ib->second), std::pair<int32_t, int64_t>{rank++, im->second});
    }
  }

  // One id per code point of `word`; an unknown one becomes its bytes' <0xXX> tokens (byte
  // fallback), [UNK] (consecutive ones fused with fuse_unk) or nothing.
  std::vector<int64_t> initial_symbols(const std::string& word) const {
    std::vector<int64_t> syms;
    const std::vector<std::size_t> b = char_bounds(word);
    bool last_unk = false;
    for (std::size_t i = 0; i + 1 < b.size(); ++i) {
      const std::string ch = word.substr(b[i], b[i + 1] - b[i]);
      if (auto it = vocab_.find(ch); it != vocab_.end()) {
        syms.push_back(it->second);
        last_unk = false;
        continue;
      }
      if (byte_fallback_ && push_bytes(ch, syms)) {
        last_unk = false;
        continue;
      }
      if (!unk_) continue;
      if (!(fuse_unk_ && last_unk)) syms.push_back(*unk_);
      last_unk = true;
    }
    return syms;
  }

  bool push_bytes(const std::string& ch, std::vector<int64_t>& syms) const {
    std::vector<int64_t> bytes;
    for (unsigned char c : ch) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", c);
      auto it = vocab_.find(name);
      if (it == vocab_.end()) return false;
      bytes.push_back(it->second);
    }
    syms.insert(syms.end(), bytes.begin(), bytes.end());
    return true;
  }

  // Applies the merges: always the lowest rank present, the leftmost of equal ranks.
  std::vector<int64_t> merge(const std::vector<int64_t>& ids) const {
    struct Sym {
      int64_t id;
      int prev, next;
      bool alive;
    };
    std::vector<Sym> s;
    for (std::size_t i = 0; i < ids.size(); ++i)
      s.push_back({ids[i], static_cast<int>(i) - 1, i + 1 < ids.size() ? static_cast<int>(i) + 1 : -1, true});
    using Entry = std::tuple<int32_t, int, int64_t>;  // rank, position, merged id
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> q;
    auto push = [&](int pos) {
      if (pos < 0 || s[pos].next < 0) return;
      auto it = merges_.find(key(s[pos].id, s[s[pos].next].id));
      if (it != merges_.end()) q.emplace(it->second.first, pos, it->second.second);
    };
    for (std::size_t i = 0; i + 1 < s.size(); ++i) push(static_cast<int>(i));
    while (!q.empty()) {
      auto [rank, pos, merged] = q.top();
      q.pop();
      if (!s[pos].alive || s[pos].next < 0) continue;
      auto it = merges_.find(key(s[pos].id, s[s[pos].next].id));
      if (it == merges_.end() || it->second.second != merged) continue;  // stale entry
      const int right = s[pos].next;
      s[pos].id = merged;
      s[right].alive = false;
      s[pos].next = s[right].next;
      if (s[pos].next >= 0) s[s[pos].next].prev = pos;
      push(s[pos].prev);
      push(pos);
    }
    std::vector<int64_t> out;
    for (const Sym& x : s)
      if (x.alive) out.push_back(x.id);
    return out;
  }

  Vocab vocab_;
  std::unordered_map<uint64_t, std::pair<int32_t, int64_t>> merges_;
  std::optional<int64_t> unk_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  int64_t size_ = 0;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

}  // namespace

std::unique_ptr<Model> make_model(const json& j, const std::string& path) {
  const std::string type = j.value("type", "");
  if (type == "WordPiece") return std::make_unique<WordPiece>(j, path);
  if (type == "BPE" || (type.empty() && j.contains("merges"))) return std::make_unique<Bpe>(j, path);
  throw Error(Exit::data, path,
              "unsupported tokenizer component: model " + (type.empty() ? std::string("without a type") : type) +
                  " (supported: WordPiece, BPE; use the SentencePiece .model file for Unigram models)");
}

}  // namespace traincache::text::hf
