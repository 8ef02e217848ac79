#include "traincache/train/checkpoint_file.h"

#include <zip.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "traincache/base/content_hash.h"
#include "traincache/base/error.h"

namespace traincache::train {

namespace {

struct ZipCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};
struct FileCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};
using Archive = std::unique_ptr<zip_t, ZipCloser>;

// The index of the one member whose name ends with `suffix` ("archive/data.pkl": LibTorch names
// the archive's folder after the archive); nothing when none or several do.
std::optional<zip_uint64_t> member(zip_t* za, const std::string& suffix) {
  std::optional<zip_uint64_t> found;
  const zip_int64_t n = zip_get_num_entries(za, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* name = zip_get_name(za, static_cast<zip_uint64_t>(i), 0);
    const std::string s = name ? name : "";
    if (s.size() < suffix.size() || s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    if (found) return std::nullopt;
    found = static_cast<zip_uint64_t>(i);
  }
  return found;
}

// Feeds the stored bytes of member `i` to `sink` as they are in the file: read to its size and no
// further, for libzip checks the CRC on the read that meets the end (LibTorch checks none; a changed
// byte is the digest's to find). False when the member is compressed (not save_checkpoint's
// layout) or cannot be read.
template <class Sink>
bool read_stored(zip_t* za, zip_uint64_t i, Sink&& sink) {
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat_index(za, i, 0, &st) != 0 || !(st.valid & ZIP_STAT_COMP_METHOD) || !(st.valid & ZIP_STAT_SIZE) ||
      st.comp_method != ZIP_CM_STORE)
    return false;
  std::unique_ptr<zip_file_t, FileCloser> f(zip_fopen_index(za, i, 0));
  if (!f) return false;
  std::vector<char> buf(1 << 20);
  for (zip_uint64_t left = st.size; left > 0;) {
    const zip_int64_t n = zip_fread(f.get(), buf.data(), std::min<zip_uint64_t>(left, buf.size()));
    if (n <= 0) return false;
    sink(buf.data(), static_cast<std::size_t>(n));
    left -= static_cast<zip_uint64_t>(n);
  }
  return true;
}

// The digest the record (LibTorch's pickle of the outer archive) stores under "payload_xxh3": the
// key as a pickled string, perhaps memoised (BINPUT, LONG_BINPUT), then its value, a pickled
// string of 32 hex digits. Nothing when the record is not laid out so.
std::optional<std::string> stored_digest(const std::string& record) {
  const std::string key = std::string("X\x0c\0\0\0", 5) + "payload_xxh3";
  std::size_t at = record.find(key);
  if (at == std::string::npos) return std::nullopt;
  at += key.size();
  if (at < record.size() && record[at] == 'q')
    at += 2;
  else if (at < record.size() && record[at] == 'r')
    at += 5;
  const std::string value = std::string("X\x20\0\0\0", 5);
  if (at + value.size() + 32 > record.size() || record.compare(at, value.size(), value) != 0) return std::nullopt;
  std::string hex = record.substr(at + value.size(), 32);
  for (unsigned char c : hex)
    if (!std::isxdigit(c) || std::isupper(c)) return std::nullopt;
  return hex;
}

}  // namespace

std::string checkpoint_path(const std::string& dir) { return dir + "/checkpoint.pt"; }

void check_checkpoint_digest(const std::string& path) {
  int code = 0;
  Archive za(zip_open(path.c_str(), ZIP_RDONLY, &code));
  if (!za) {
    if (code == ZIP_ER_NOZIP || code == ZIP_ER_INCONS) throw Error(Exit::data, path, kUnreadableCheckpoint);
    return;  // not read at all (permissions, I/O): LibTorch says why
  }
  const auto record = member(za.get(), "/data.pkl"), payload = member(za.get(), "/data/0");
  if (!record || !payload) return;
  std::string text;
  if (!read_stored(za.get(), *record, [&](const char* p, std::size_t n) { text.append(p, n); })) return;
  const auto want = stored_digest(text);
  if (!want) return;
  ContentHash h;
  if (!read_stored(za.get(), *payload, [&](const char* p, std::size_t n) { h.update(p, n); })) return;
  if (h.hex_digest() != *want) throw Error(Exit::data, path, kDamagedCheckpoint);
}

}  // namespace traincache::train
