// libFuzzer harness: the tokenizer.json reader and the tokenizers. The input is loaded as a
// tokenizer.json (and, when that works, encodes a few texts with and without truncation), and it
// is encoded as text (ill-formed UTF-8 repaired, as the readers do) by a WordPiece tokenizer with
// every BertNormalizer option and by a byte-level BPE one with added tokens.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "traincache/base/error.h"
#include "traincache/text/tokenizer.h"

using namespace traincache;

namespace {

const char* const kWordPiece = R"({
  "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                 "strip_accents": true, "lowercase": true},
  "pre_tokenizer": {"type": "BertPreTokenizer"},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
    "pair": [], "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                   "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
  "added_tokens": [{"id": 0, "content": "[PAD]", "special": true, "lstrip": false, "rstrip": false,
                    "normalized": false, "single_word": false}],
  "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100,
            "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4, "b": 5, "##a": 6, "##b": 7,
                      "ab": 8, "中": 9, ".": 10}}
})";

const char* const kByteBpe = R"({
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
                     "trim_offsets": true, "add_prefix_space": true},
  "added_tokens": [{"id": 3, "content": "<mask>", "special": true, "lstrip": true, "rstrip": false,
                    "normalized": false, "single_word": false}],
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "fuse_unk": false, "byte_fallback": false,
            "vocab": {"<s>": 0, "<pad>": 1, "</s>": 2, "<mask>": 3, "a": 4, "b": 5, "Ġ": 6, "Ġa": 7, "ab": 8},
            "merges": ["Ġ a", "a b"]}
})";

// The fixed tokenizers, loaded once.
const std::vector<std::unique_ptr<text::Tokenizer>>& fixed() {
  static const auto tokenizers = [] {
    std::vector<std::unique_ptr<text::Tokenizer>> out;
    for (const char* doc : {kWordPiece, kByteBpe}) {
      const std::string path = fuzz::work_dir() + "/fixed.json";
      fuzz::write_input(path, reinterpret_cast<const uint8_t*>(doc), std::string(doc).size());
      out.push_back(text::load(path));  // a broken harness throws here, before any input
    }
    return out;
  }();
  return tokenizers;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string path = fuzz::work_dir() + "/t.json";
  fuzz::write_input(path, data, size);
  try {
    auto tok = text::load(path);
    for (const char* s : {"a b ab", "ÀÉ 中文 \xF0\x9F\x98\x80 x", "   ", "[CLS] a"})
      for (int64_t max_length : {0, 1, 3}) (void)tok->encode(s, max_length);
  } catch (const Error&) {
  }
  std::string s(reinterpret_cast<const char*>(data), size);
  text::repair_utf8(s);
  for (const auto& tok : fixed())
    for (int64_t max_length : {0, 2, 5}) (void)tok->encode(s, max_length);
  return 0;
}
