#!/usr/bin/env python3
"""Writes N test strings (one JSON string per line) for the tokenizer parity tests.

usage: text_strings.py OUT.jsonl N SEED

Seeded and deterministic. The strings mix WordNet gloss words with accents (precomposed and
combining), CJK ideographs, Hangul, kana, Greek, Cyrillic, Arabic, emoji (with skin tones and ZWJ
sequences), control characters, whitespace runs of many kinds, zero-width characters, private-use
and replacement characters, Unicode punctuation, digits, English contractions, special-token
spellings ([CLS], <mask>, ...) and texts far longer than any --max-length in the tests.

Left out, because Tokenizers.js (the reference when these strings were chosen; Hugging Face's
Rust library is now) and the Rust library (which traincache follows) disagree on them (docs/text.md,
"Parity"; changing the strings changes every committed id file): capital sigma U+03A3 (JavaScript lowercases it
by context, Rust by character), U+0085 and U+FEFF (JavaScript's \\s differs from Unicode's
White_Space), ideographs outside the BMP (Tokenizers.js's BertNormalizer walks UTF-16 units), and
characters assigned after Unicode 14 (PCRE2 10.42's tables).
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import traincache_text as tt  # noqa: E402


def ranges(*pairs):
    return [chr(c) for a, b in pairs for c in range(a, b + 1)]


ACCENTED = ranges((0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x17F))
COMBINING = ranges((0x300, 0x36F))
CJK = ranges((0x4E00, 0x4FFF), (0x6000, 0x60FF), (0x3400, 0x340F), (0xF900, 0xF90F))
HANGUL = ranges((0xAC00, 0xAD00))
KANA = ranges((0x3041, 0x3096), (0x30A1, 0x30FA))
GREEK = [c for c in ranges((0x391, 0x3A9), (0x3B1, 0x3C9)) if c != "\u03a3"]
CYRILLIC = ranges((0x410, 0x44F))
ARABIC = ranges((0x621, 0x64A))
EMOJI = ranges((0x1F300, 0x1F64F), (0x1F680, 0x1F6C5))
SKIN = ranges((0x1F3FB, 0x1F3FF))
CONTROL = [c for c in ranges((0x00, 0x1F), (0x7F, 0x9F)) if c != "\x85"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2002", "\u2003", "\u2009", "\u3000", "\u202f", "\u205f",
          "\u1680", "\u2028", "\u2029", "\x0b", "\x0c"]
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\u00ad"]
ODD = ["\ue000", "\uf8ff", "\ufffd", "\U000f0000"]
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["\u201c", "\u201d", "\u2014", "\u2026", "\u00bf",
                                                     "\u00a1", "\u3001", "\u3002", "\uff01", "\u00ab", "\u00bb"]
SPECIAL = ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "<s>", "</s>", "<mask>", "<pad>", "<|endoftext|>"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "n't"]


def piece(rng, words):
    r = rng.random()
    if r < 0.40:
        w = rng.choice(words)
        return w.capitalize() if rng.random() < 0.2 else (w.upper() if rng.random() < 0.05 else w)
    if r < 0.47:
        return "".join(rng.choice(ACCENTED) for _ in range(rng.randint(1, 6)))
    if r < 0.50:
        return rng.choice(words) + "".join(rng.choice(COMBINING) for _ in range(rng.randint(1, 2)))
    if r < 0.55:
        return "".join(rng.choice(CJK) for _ in range(rng.randint(1, 8)))
    if r < 0.57:
        return "".join(rng.choice(HANGUL + KANA) for _ in range(rng.randint(1, 6)))
    if r < 0.60:
        return "".join(rng.choice(GREEK + CYRILLIC + ARABIC) for _ in range(rng.randint(2, 8)))
    if r < 0.64:
        e = rng.choice(EMOJI)
        if rng.random() < 0.3:
            e += rng.choice(SKIN)
        if rng.random() < 0.2:
            e += "\u200d" + rng.choice(EMOJI)
        return e
    if r < 0.68:
        return rng.choice(CONTROL)
    if r < 0.76:
        return "".join(rng.choice(SPACES) for _ in range(rng.randint(1, 5)))
    if r < 0.78:
        return rng.choice(ZERO_WIDTH + ODD)
    if r < 0.86:
        return "".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 3)))
    if r < 0.91:
        return str(rng.randint(0, 10 ** rng.randint(1, 9)))
    if r < 0.95:
        return rng.choice(words) + rng.choice(CONTRACTIONS)
    if r < 0.97:
        return rng.choice(SPECIAL)
    return rng.choice(words).upper()


def generate(n, seed):
    rng = random.Random(seed)
    glosses = [g for _, g in tt.wordnet_pairs()]
    words = sorted({w for g in glosses[:5000] for w in g.split()})
    out = []
    for i in range(n):
        if i % 50 == 0:  # far longer than --max-length
            text = " ".join(rng.choice(glosses) for _ in range(rng.randint(6, 12)))
        elif i % 7 == 0:  # a plain gloss
            text = rng.choice(glosses)
        else:
            parts = [piece(rng, words) for _ in range(rng.randint(1, 14))]
            text = "".join(p + (rng.choice(SPACES[:3]) if rng.random() < 0.7 else "") for p in parts)
        out.append(text or "x")
    return out


def main():
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        return 64
    path, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with open(path, "w", encoding="utf-8") as f:
        for s in generate(n, seed):
            f.write(json.dumps(s) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
