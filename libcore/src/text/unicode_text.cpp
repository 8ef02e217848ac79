#include "unicode_text.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "traincache/base/error.h"

namespace traincache::text::uni {

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    char32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out += cp;
    i += n;
  }
  return out;
}

std::string encode(const std::u32string& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) append_utf8(c, out);
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

int category(char32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)); }

bool is_whitespace(char32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85) return true;
  if (cp < 0x80) return false;
  const int c = category(cp);
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

bool is_other(char32_t cp) {
  const int c = category(cp);
  return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CO ||
         c == UTF8PROC_CATEGORY_CS || c == UTF8PROC_CATEGORY_CN;
}

bool is_punctuation(char32_t cp) {
  const int c = category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

bool is_nonspacing_mark(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_MN; }

bool is_mark(char32_t cp) {
  const int c = category(cp);
  return c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_ME;
}

bool is_letter(char32_t cp) {
  const int c = category(cp);
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}

bool is_number(char32_t cp) {
  const int c = category(cp);
  return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
}

void append_lowercase(char32_t cp, std::u32string& out) {
  if (cp < 0x80) {
    out += (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  } else if (cp == 0x130) {  // LATIN CAPITAL LETTER I WITH DOT ABOVE: SpecialCasing's i + U+0307
    out += U'i';
    out += char32_t{0x307};
  } else {
    out += static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
  }
}

std::string normalize(std::string_view s, Form form) {
  if (is_ascii(s)) return std::string(s);  // every form leaves ASCII as it is
  int options = UTF8PROC_STABLE;
  switch (form) {
    case Form::nfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case Form::nfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case Form::nfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case Form::nfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* dst = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &dst,
                   static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(dst, &std::free);
  if (n < 0) throw Error(Exit::internal, "utf8proc", utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(dst), static_cast<std::size_t>(n));
}

}  // namespace traincache::text::uni
