// libtraincache_spm: SentencePiece behind a C ABI, loaded with dlopen(RTLD_LOCAL | RTLD_DEEPBIND).
// Debian's libsentencepiece carries its own copy of protobuf-lite and exports it; linked into a
// process that also loads LibTorch's libprotobuf, the two copies bind to each other's symbols and
// the process crashes before main. Kept apart in this module, each binds to its own.
#include <sentencepiece_processor.h>

#include <cstring>
#include <string>
#include <vector>

extern "C" {

void* tc_spm_load(const char* bytes, std::size_t size, char* err, std::size_t err_size) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  auto st = sp->LoadFromSerializedProto(absl::string_view(bytes, size));
  if (st.ok()) return sp;
  std::snprintf(err, err_size, "%s", st.ToString().c_str());
  delete sp;
  return nullptr;
}

void tc_spm_free(void* sp) { delete static_cast<sentencepiece::SentencePieceProcessor*>(sp); }

int tc_spm_piece_size(void* sp) { return static_cast<sentencepiece::SentencePieceProcessor*>(sp)->GetPieceSize(); }

int tc_spm_pad_id(void* sp) { return static_cast<sentencepiece::SentencePieceProcessor*>(sp)->pad_id(); }

// Encodes `text`; calls `out(ids, n, ctx)` once with the ids. Returns 0, or -1 with `err` set.
int tc_spm_encode(void* sp, const char* text, std::size_t size, void (*out)(const int*, std::size_t, void*), void* ctx,
                  char* err, std::size_t err_size) {
  std::vector<int> ids;
  auto st = static_cast<sentencepiece::SentencePieceProcessor*>(sp)->Encode(absl::string_view(text, size), &ids);
  if (!st.ok()) {
    std::snprintf(err, err_size, "%s", st.ToString().c_str());
    return -1;
  }
  out(ids.data(), ids.size(), ctx);
  return 0;
}
}
