// Tokenizers: the Rust crate's semantics where Tokenizers.js differs (the parity test leaves those
// inputs out), UTF-8 repair, padding and truncation, and the errors of bad tokenizer files.
#include "traincache/text/tokenizer.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "catch.h"
#include "traincache/base/error.h"

using namespace traincache;
using nlohmann::json;

namespace {

// A tokenizer.json written to a temporary file, loaded.
std::unique_ptr<text::Tokenizer> load_json(const json& j) {
  char path[] = "/tmp/tc-tok-XXXXXX";
  int fd = mkstemp(path);
  const std::string s = j.dump();
  CATCH_REQUIRE(::write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size()));
  close(fd);
  std::unique_ptr<text::Tokenizer> t;
  try {
    t = text::load(path);
  } catch (...) {
    unlink(path);
    throw;
  }
  unlink(path);
  return t;
}

json bert(const std::vector<std::string>& words) {
  json vocab{{"[PAD]", 0}, {"[UNK]", 1}, {"[CLS]", 2}, {"[SEP]", 3}};
  for (const auto& w : words) vocab[w] = vocab.size();
  return {
      {"added_tokens",
       {{{"id", 0}, {"content", "[PAD]"}, {"special", true}}, {{"id", 2}, {"content", "[CLS]"}, {"special", true}}}},
      {"normalizer", {{"type", "BertNormalizer"}, {"lowercase", true}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor", {{"type", "BertProcessing"}, {"cls", {"[CLS]", 2}}, {"sep", {"[SEP]", 3}}}},
      {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"vocab", vocab}}}};
}

std::string error_of(const json& j) {
  try {
    load_json(j);
  } catch (const Error& e) {
    return std::to_string(static_cast<int>(e.code())) + " " + e.what();
  }
  return "no error";
}

}  // namespace

CATCH_TEST_CASE("WordPiece with BertNormalizer follows the Rust crate", "[text]") {
  auto t = load_json(bert({"οδοσ", "a", "b", "##b", "𠀀", "hello"}));
  CATCH_CHECK(std::string(t->kind()) == "wordpiece");
  CATCH_CHECK(t->vocab_size() == 10);
  CATCH_CHECK(t->special_tokens() == 2);
  // Capital sigma lowercases character by character (Tokenizers.js gives final ς by context).
  CATCH_CHECK(t->encode("ΟΔΟΣ", 0).ids == std::vector<int64_t>{2, 4, 3});
  // Ideographs outside the BMP are split off like the BMP ones.
  CATCH_CHECK(t->encode("a𠀀b", 0).ids == std::vector<int64_t>{2, 5, 8, 6, 3});
  // Controls other than tab/LF/CR are dropped (VT and NEL join words), whitespace splits.
  CATCH_CHECK(t->encode("a\x0b"
                        "b",
                        0)
                  .ids == std::vector<int64_t>{2, 5, 7, 3});
  CATCH_CHECK(t->encode("a\xc2\x85"
                        "b",
                        0)
                  .ids == std::vector<int64_t>{2, 5, 7, 3});
  CATCH_CHECK(t->encode("a\tb", 0).ids == std::vector<int64_t>{2, 5, 6, 3});
  // Accents stripped with lowercase; unknown words are one [UNK]; [CLS] in the text is the token.
  CATCH_CHECK(t->encode("HÉLLO á zz [CLS]", 0).ids == std::vector<int64_t>{2, 9, 5, 1, 2, 3});
  // Truncation keeps the special tokens: 4 tokens = [CLS] 2 content [SEP].
  CATCH_CHECK(t->encode("a b a b a", 4).ids == std::vector<int64_t>{2, 5, 6, 3});
  CATCH_CHECK(t->encode("a", 0).type_ids == std::vector<int64_t>{0, 0, 0});
  CATCH_CHECK(t->pad_id() == 0);
}

CATCH_TEST_CASE("byte-level BPE merges lowest rank first, leftmost among equals", "[text]") {
  json vocab = json::object();
  for (const char* s : {"a", "b", "aa", "ab", "aab", "Ġ", "Ġa", "<0x41>"}) vocab[s] = vocab.size();
  json j{{"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
         {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a a", "a b", "aa b", "Ġ a"}}}}};
  auto t = load_json(j);
  CATCH_CHECK(std::string(t->kind()) == "bpe");
  CATCH_CHECK(t->encode("aaa", 0).ids == std::vector<int64_t>{2, 0});  // aa a, not a aa
  CATCH_CHECK(t->encode("aab", 0).ids == std::vector<int64_t>{4});     // aa b -> aab
  CATCH_CHECK(t->encode("a a", 0).ids == std::vector<int64_t>{0, 6});  // "a", " a"
  CATCH_CHECK(t->encode("abab", 0).ids == std::vector<int64_t>{3, 3});
  // Without an unk_token an unknown character is dropped before the merges, as the Rust crate
  // does (Tokenizers.js drops it after them and would give a a).
  CATCH_CHECK(t->encode("aXa", 0).ids == std::vector<int64_t>{2});
}

CATCH_TEST_CASE("padding to the longest text or to max_length, with masks", "[text]") {
  auto t = load_json(bert({"a", "b"}));
  text::TokenizeOptions o;
  o.max_length = 6;
  auto b = text::tokenize_batch(*t, {"a b a", "b"}, o, "texts");
  CATCH_CHECK(b.rows == 2);
  CATCH_CHECK(b.length == 5);
  CATCH_CHECK(b.input_ids == std::vector<int64_t>{2, 4, 5, 4, 3, 2, 5, 3, 0, 0});
  CATCH_CHECK(b.attention_mask == std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 0, 0});
  o.padding = text::Padding::max_length;
  b = text::tokenize_batch(*t, {"a b a b a b a", "b"}, o, "texts");
  CATCH_CHECK(b.length == 6);
  CATCH_CHECK(b.input_ids == std::vector<int64_t>{2, 4, 5, 4, 5, 3, 2, 5, 3, 0, 0, 0});
  CATCH_CHECK_THROWS_WITH(text::tokenize_batch(*t, {"a", ""}, o, "texts"), "texts row 1: empty text");
  CATCH_CHECK(text::effective_max_length(*t, {}) == 512);
  // Texts cut: "a b a b a b a" (7 tokens and 2 special) at 6; "b" (3) and "a b a b" (6) fit.
  CATCH_CHECK(b.truncated == 1);
  CATCH_CHECK(text::tokenize_batch(*t, {"a b a b", "b"}, o, "texts").truncated == 0);
  CATCH_CHECK(text::tokenize_rows(*t, {"a b a b a", "a b a b a b", "b"}, o, "texts").truncated == 2);
  // A length that cannot hold the special tokens (the fuzzer's 1): the specials alone, cut.
  const text::Encoding one = t->encode("a b", 1);
  CATCH_CHECK(one.ids == std::vector<int64_t>{2, 3});
  CATCH_CHECK(one.truncated);
}

CATCH_TEST_CASE("a sentence-transformers folder's max_seq_length is the default maximum length", "[text]") {
  char tmpl[] = "/tmp/tc-st-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  json j = bert({"a", "b"});
  j["truncation"] = {{"max_length", 128}};
  std::ofstream(dir + "/tokenizer.json") << j.dump();
  auto file_only = text::load(dir + "/tokenizer.json");
  CATCH_CHECK(file_only->model_max_length() == 0);
  CATCH_CHECK(text::effective_max_length(*file_only, {}) == 128);  // tokenizer.json's truncation

  std::ofstream(dir + "/sentence_bert_config.json") << R"({"max_seq_length": 256, "do_lower_case": false})";
  auto folder = text::load(dir + "/tokenizer.json");
  CATCH_CHECK(folder->model_max_length() == 256);
  text::TokenizeOptions o;
  CATCH_CHECK(text::effective_max_length(*folder, o) == 256);  // as SentenceTransformer.encode cuts
  o.max_length = 64;
  CATCH_CHECK(text::effective_max_length(*folder, o) == 64);  // --max-length still wins

  std::ofstream(dir + "/sentence_bert_config.json", std::ios::trunc) << R"({"max_seq_length": null})";
  CATCH_CHECK(text::effective_max_length(*text::load(dir + "/tokenizer.json"), {}) == 128);
  // A malformed one is refused where the length is asked for, unless --max-length stands in for it.
  for (const char* bad : {R"({"max_seq_length": "long"})", R"({"max_seq_length": 0})", "[1]", "{"}) {
    std::ofstream(dir + "/sentence_bert_config.json", std::ios::trunc) << bad;
    const auto tok = text::load(dir + "/tokenizer.json");
    try {
      text::effective_max_length(*tok, {});
      CATCH_FAIL("accepted " << bad);
    } catch (const Error& e) {
      CATCH_CHECK(e.code() == Exit::data);
      CATCH_CHECK(std::string(e.what()).rfind(dir + "/sentence_bert_config.json: ", 0) == 0);
    }
    text::TokenizeOptions given;
    given.max_length = 64;
    CATCH_CHECK(text::effective_max_length(*tok, given) == 64);
  }
  std::remove((dir + "/sentence_bert_config.json").c_str());
  std::remove((dir + "/tokenizer.json").c_str());
  rmdir(dir.c_str());
}

CATCH_TEST_CASE("token rows are padded per batch from unpadded sequences", "[text]") {
  auto t = load_json(bert({"a", "b"}));
  text::TokenizeOptions o;
  o.max_length = 4;
  std::vector<std::string> texts;
  for (int i = 0; i < 3000; ++i)
    texts.push_back(std::string(static_cast<std::size_t>(i % 4) * 2, ' ') + "a" + (i % 3 ? " b" : ""));
  auto one = text::tokenize_rows(*t, texts, o, "texts", 1);
  auto many = text::tokenize_rows(*t, texts, o, "texts", 4);
  CATCH_CHECK(one.size() == 3000);
  CATCH_CHECK(many.offsets == one.offsets);  // the thread count changes nothing
  CATCH_CHECK(many.ids == one.ids);
  CATCH_CHECK(one.length(0) == 3);  // [CLS] a [SEP]
  CATCH_CHECK(one.length(1) == 4);  // [CLS] a b [SEP]
  // Rows in any order, repeated; to the longest of them, or to a fixed length (truncating).
  auto b = text::pad_rows(one, {0, 1, 0});
  CATCH_CHECK(b.length == 4);
  CATCH_CHECK(b.input_ids == std::vector<int64_t>{2, 4, 3, 0, 2, 4, 5, 3, 2, 4, 3, 0});
  CATCH_CHECK(b.attention_mask == std::vector<int64_t>{1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0});
  CATCH_CHECK(text::pad_rows(one, {0}).length == 3);
  CATCH_CHECK(text::pad_rows(one, {1}, 2).input_ids == std::vector<int64_t>{2, 4});
  // extend() appends sequences after the others'.
  auto both = one;
  both.extend(text::tokenize_rows(*t, {"b"}, o, "more"));
  CATCH_CHECK(both.size() == 3001);
  CATCH_CHECK(text::pad_rows(both, {3000}).input_ids == std::vector<int64_t>{2, 5, 3});
  texts[1600].clear();  // the error names the first empty row, whichever thread found it
  texts[2900].clear();
  CATCH_CHECK_THROWS_WITH(text::tokenize_rows(*t, texts, o, "texts", 4), "texts row 1600: empty text");
  // tokenize_batch on threads: the same padded batch, truncation count and rows named.
  texts[1600] = texts[2900] = "a b a b a b a";  // cut at 6 tokens
  o.max_length = 6;
  const auto alone = text::tokenize_batch(*t, texts, o, "texts", 10, nullptr, 1);
  const auto shared = text::tokenize_batch(*t, texts, o, "texts", 10, nullptr, 3);
  CATCH_CHECK(alone.truncated == 2);
  CATCH_CHECK(shared.truncated == 2);
  CATCH_CHECK(shared.length == alone.length);
  CATCH_CHECK(shared.input_ids == alone.input_ids);
  CATCH_CHECK(shared.attention_mask == alone.attention_mask);
  texts[2000].clear();
  texts[2500].clear();
  CATCH_CHECK_THROWS_WITH(text::tokenize_batch(*t, texts, o, "texts", 10, nullptr, 3), "texts row 2010: empty text");
  std::vector<int64_t> rows(texts.size());
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = 7 * static_cast<int64_t>(i);
  CATCH_CHECK_THROWS_WITH(text::tokenize_batch(*t, texts, o, "texts", 0, &rows, 3), "texts row 14000: empty text");
}

CATCH_TEST_CASE("invalid UTF-8 becomes U+FFFD, one per maximal subpart", "[text]") {
  const std::string fffd = "\xEF\xBF\xBD";
  std::string s =
      "a\xff"
      "b";
  CATCH_CHECK(text::first_invalid_utf8(s) == 1);
  CATCH_CHECK(text::repair_utf8(s) == 1);
  CATCH_CHECK(s == "a" + fffd + "b");
  s = "\xe2\x82";  // a truncated 3-byte sequence is one maximal subpart
  CATCH_CHECK(text::repair_utf8(s) == 1);
  CATCH_CHECK(s == fffd);
  s = "\xed\xa0\x80z";  // a surrogate: three
  CATCH_CHECK(text::repair_utf8(s) == 3);
  CATCH_CHECK(s == fffd + fffd + fffd + "z");
  s = "ok é 中 😀";
  CATCH_CHECK(text::first_invalid_utf8(s) == std::string::npos);
  CATCH_CHECK(text::repair_utf8(s) == 0);
}

CATCH_TEST_CASE("bad tokenizer files are refused naming what is wrong", "[text]") {
  CATCH_CHECK_THAT(error_of({{"x", 1}}), Catch::Matchers::EndsWith("not a tokenizer.json: no \"model\" object"));
  json j = bert({"a"});
  j["normalizer"] = {{"type", "Precompiled"}};
  CATCH_CHECK_THAT(error_of(j), Catch::Matchers::EndsWith("unsupported tokenizer component: normalizer Precompiled"));
  j = bert({"a"});
  j["model"]["type"] = "Unigram";
  CATCH_CHECK_THAT(error_of(j), traincache::test::contains_text("unsupported tokenizer component: model Unigram"));
  j = bert({"a"});
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  CATCH_CHECK_THAT(error_of(j), Catch::Matchers::EndsWith("unsupported tokenizer component: pre_tokenizer Metaspace"));
  j = bert({"a"});
  j["model"]["unk_token"] = "<unk>";
  CATCH_CHECK_THAT(error_of(j), Catch::Matchers::EndsWith("WordPiece: unk_token '<unk>' is not in the vocabulary"));
  // Hugging Face refuses a negative count here (a usize); it was taken (issue 43, item 32).
  for (json bad : {json(-1), json(1.5), json("100")}) {
    j = bert({"a"});
    j["model"]["max_input_chars_per_word"] = bad;
    CATCH_CHECK_THAT(error_of(j), Catch::Matchers::EndsWith("WordPiece: max_input_chars_per_word " + bad.dump() +
                                                            " is not a count of characters"));
  }
  json bpe{{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", {"a a"}}}}};
  CATCH_CHECK_THAT(error_of(bpe),
                   Catch::Matchers::EndsWith("BPE: merge 'a a' uses a token that is not in the vocabulary"));
  bpe["model"]["merges"] = json::array();
  bpe["model"]["dropout"] = 0.1;
  CATCH_CHECK_THAT(error_of(bpe), traincache::test::contains_text("BPE dropout is random"));
  CATCH_CHECK(error_of(bpe).rfind("65 ", 0) == 0);
  CATCH_CHECK_THROWS_WITH(text::load("/nonexistent/tokenizer.json"),
                          "/nonexistent/tokenizer.json: no such file or directory");
}
