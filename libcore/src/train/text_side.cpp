#include <memory>

#include "data.h"
#include "traincache/base/error.h"
#include "traincache/base/sha256.h"

namespace traincache::train {

namespace {

// --data-cache: a text side's token sequences (f's texts, then its negatives) in a sealed slab,
// tokenized by one process of the node and shared by all; named after what the tokens are made from
// (the file's identity, the fields, the tokenizer, the truncation), or NAME-`index` with
// --data-cache-keep.
std::shared_ptr<data_cache::SealedSlab> shared_tokens(const TrainOptions& o, const TextSource& src, const TextSide& t,
                                                      const TextFields& f, int index) {
  const std::string &file = src.file, &field = src.field, &neg_field = src.negatives;
  const std::vector<std::string>&texts = f.texts, &negs = f.negatives;
  const std::string parts = std::string("text") + '\0' + canonical(file) + '\0' + file_stamp(file) + field + '\0' +
                            neg_field + '\0' + sha256_file(t.tokenizer) + '\0' +
                            std::to_string(text::effective_max_length(*t.tok, o.tokenize)) + '\0' +
                            (o.tokenize.strict_utf8 ? "strict" : "replace") + '\0';
  slab::CreateOptions want;
  want.content_id = data_cache::content_id(parts);
  want.name = o.data_cache.keep.empty() ? "gc-train-" + want.content_id.substr(want.content_id.size() - 16)
                                        : o.data_cache.keep + "-" + std::to_string(index);
  slab::validate_name(want.name);
  want.dtype = DType::i32;
  want.tool = "gc-train";
  want.temporary = o.data_cache.keep.empty();
  auto make = [&] {
    const std::string what = file + ": field '";
    auto rows = std::make_shared<text::TokenRows>(
        text::tokenize_rows(*t.tok, texts, o.tokenize, what + field + "'", o.threads));
    if (!negs.empty()) rows->extend(text::tokenize_rows(*t.tok, negs, o.tokenize, what + neg_field + "'", o.threads));
    data_cache::SealedItems items;
    items.count = static_cast<uint64_t>(rows->size());
    items.bytes = rows->ids.size() * 2 * sizeof(int32_t);
    items.fill = [rows](slab::Slab& slab) {
      std::vector<int32_t> buf;
      for (int64_t i = 0; i < rows->size(); ++i) {
        const auto from = rows->ids.begin() + rows->offsets[static_cast<std::size_t>(i)];
        const auto type_from = rows->type_ids.begin() + rows->offsets[static_cast<std::size_t>(i)];
        buf.assign(from, from + rows->length(i));
        buf.insert(buf.end(), type_from, type_from + rows->length(i));
        if (!slab.set(static_cast<uint64_t>(i), buf.data(), buf.size() * sizeof(int32_t)))
          throw Error(Exit::internal, slab.info().name, "sequence " + std::to_string(i) + " was not stored");
      }
    };
    return items;
  };
  return data_cache::SealedSlab::open(want, o.trust_slab_owner, make);
}

}  // namespace

// A text side: `f`, the texts of `src` (and of its hard negatives), tokenized in this process, or
// through the node's shared slab with --data-cache (`cache_index`: its --data-cache-keep number).
std::unique_ptr<TextSide> load_text(const TrainOptions& o, const Setup& s, const TextSource& src, TextFields f,
                                    int cache_index) {
  auto side = std::make_unique<TextSide>();
  TextSide& t = *side;
  t.tokenizer = f.tokenizer;
  t.tok = std::move(f.tok);
  t.device = s.device;
  if (o.tokenize.padding == text::Padding::max_length) t.length = text::effective_max_length(*t.tok, o.tokenize);
  t.n_rows = static_cast<int64_t>(f.texts.size());
  t.n_negatives = f.per_row;
  if (o.data_cache.mode != data_cache::Mode::none) {
    t.shared = shared_tokens(o, src, t, f, cache_index);
    t.seqs.pad_id = t.tok->pad_id();
    return side;
  }
  t.seqs = text::tokenize_rows(*t.tok, f.texts, o.tokenize, src.file + ": field '" + src.field + "'", o.threads);
  if (!f.negatives.empty())
    t.seqs.extend(
        text::tokenize_rows(*t.tok, f.negatives, o.tokenize, src.file + ": field '" + src.negatives + "'", o.threads));
  return side;
}

// A side whose one dataset is ragged (a variable-layout slab of token ids): its sequences as
// stored, padded per batch and chunk like text. Nothing for other datasets.
std::unique_ptr<TextSide> ragged_side(const TrainOptions& o, const Setup& s, const std::string& file,
                                      const std::vector<std::string>& fields, bool negatives) {
  if (fields.size() != 1 ||
      io::source::kind_of(io::source::names_own_file(fields[0]) ? fields[0] : file) != io::source::Kind::shm)
    return nullptr;
  auto col = io::source::open_column(file, fields[0], o.files);
  if (!col->info().ragged) return nullptr;
  if (negatives)
    throw Error(Exit::usage, "--negatives",
                "hard negatives of token sequences are read from text fields (--tokenizer)");
  auto t = std::make_unique<TextSide>();
  t->n_rows = col->info().rows();
  t->device = s.device;
  t->tokenizer = fields[0];
  std::vector<int64_t> values, offsets;
  col->read_ragged(0, t->n_rows, values, offsets);
  t->seqs = text::token_rows(values, std::move(offsets), o.tokenize.pad_id, fields[0]);
  return t;
}

}  // namespace traincache::train
