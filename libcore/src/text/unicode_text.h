// Unicode helpers for the tokenizers: UTF-8 <-> code points, general categories, White_Space,
// lowercase and normalisation forms. Categories and normalisation come from utf8proc; nothing
// here holds a character table of its own. Private to libcore.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace traincache::text::uni {

/// Appends code point `cp` to `out` as UTF-8.
void append_utf8(char32_t cp, std::string& out);

/// True when every byte of `s` is ASCII (every Unicode step below leaves such text as it is).
bool is_ascii(std::string_view s);

/// The code points of valid UTF-8 `s`.
std::u32string decode(std::string_view s);

/// UTF-8 of `cps`.
std::string encode(const std::u32string& cps);

/// The general category of `cp` as utf8proc numbers it (UTF8PROC_CATEGORY_*).
int category(char32_t cp);

/// Unicode's White_Space property (as Rust's char::is_whitespace and Oniguruma's \s):
/// U+0009..U+000D, U+0085 and the separators (Zs, Zl, Zp).
bool is_whitespace(char32_t cp);

/// Categories Cc, Cf, Co, Cs and Cn (Rust's is_other, BERT's "control").
bool is_other(char32_t cp);

/// Any punctuation category (Pc, Pd, Ps, Pe, Pi, Pf, Po).
bool is_punctuation(char32_t cp);

/// Mn (the marks NFD splits accents into) / any mark (Mn, Mc, Me).
bool is_nonspacing_mark(char32_t cp);
bool is_mark(char32_t cp);

/// Letters (L*) / numbers (N*).
bool is_letter(char32_t cp);
bool is_number(char32_t cp);

/// Appends the full lowercase of `cp`, one code point at a time as Rust's char::to_lowercase
/// (no context: a final capital sigma becomes σ). U+0130 is the one code point whose lowercase is
/// two (i + U+0307); utf8proc gives the single-code-point mappings.
void append_lowercase(char32_t cp, std::u32string& out);

/// Unicode normalisation forms of valid UTF-8 (utf8proc).
enum class Form { nfc, nfd, nfkc, nfkd };
std::string normalize(std::string_view s, Form form);

}  // namespace traincache::text::uni
