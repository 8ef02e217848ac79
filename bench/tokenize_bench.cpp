// tokenize-bench: traincache's tokenizers on a file of texts, for the parity tests (--dump: the
// ids of every text, one JSON array per line, as tests/js/reference.mjs prints them) and for
// make bench (tokens per second on one core, as one JSON object).
//   tokenize-bench TOKENIZER STRINGS.jsonl [--max-length N] [--dump] [--repeat R]
// STRINGS.jsonl holds one JSON string per line. Exit 0, 64 usage, 65/66 bad or missing input.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "traincache/base/error.h"
#include "traincache/cli/cli.h"
#include "traincache/text/tokenizer.h"

using namespace traincache;

namespace {

std::vector<std::string> read_texts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(Exit::no_input, path, "cannot open");
  std::vector<std::string> texts;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_string()) throw Error(Exit::data, path + ":" + std::to_string(n), "not a JSON string");
    texts.push_back(j.get<std::string>());
  }
  return texts;
}

int run(const std::string& tok_path, const std::string& strings, int64_t max_length, bool dump, int repeat) {
  auto tok = text::load(tok_path);
  const std::vector<std::string> texts = read_texts(strings);
  if (dump) {
    std::string out;
    for (const auto& t : texts) out += nlohmann::json(tok->encode(t, max_length).ids).dump() + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  int64_t tokens = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < repeat; ++r)
    for (const auto& t : texts) tokens += static_cast<int64_t>(tok->encode(t, max_length).ids.size());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::ordered_json j{{"tokenizer", tok->kind()},
                           {"texts", texts.size() * repeat},
                           {"tokens", tokens},
                           {"seconds", s},
                           {"tokens_per_second", tokens / s}};
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tokenize-bench: token ids (--dump) or tokens per second of a tokenizer on a file of texts"};
  std::string tok_path, strings;
  int64_t max_length = 0;
  bool dump = false;
  int repeat = 1;
  app.add_option("tokenizer", tok_path, "tokenizer.json or SentencePiece .model")->required();
  app.add_option("strings", strings, "JSON Lines file, one JSON string per line")->required();
  app.add_option("--max-length", max_length, "truncate to N tokens with the special tokens (0: none)");
  app.add_flag("--dump", dump, "print the ids of every text, one JSON array per line");
  app.add_option("--repeat", repeat, "passes over the texts when timing")->check(cli::positive_integer());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 64;
  }
  try {
    return run(tok_path, strings, max_length, dump, repeat);
  } catch (const Error& e) {
    std::fprintf(stderr, "tokenize-bench: error: %s\n", e.what());
    return static_cast<int>(e.code());
  }
}
