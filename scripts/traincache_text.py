"""WordNet glosses and small tokenizer builders for the text fixtures, tests and demo.

Only the standard library: WordNet comes from Debian's wordnet-base (/usr/share/wordnet, or the folder
TRAINCACHE_WORDNET names where the package was unpacked rather than installed), and
the tokenizers are learned here and written in Hugging Face's tokenizer.json format, so that no
file is downloaded. The learners are simple (frequency-ranked WordPiece pieces, byte-pair merges
by pair count); what the tests check is that every implementation reads the files the same way.
"""
import collections
import heapq
import json
import os
import re
import tempfile

WORDNET = os.environ.get("TRAINCACHE_WORDNET", "/usr/share/wordnet")  # elsewhere where unpacked, not installed


def wordnet_pairs(root=WORDNET):
    """(lemma, gloss) for every synset of data.noun/verb/adj/adv, in file order."""
    pairs = []
    for pos in ("noun", "verb", "adj", "adv"):
        with open(os.path.join(root, "data." + pos), encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  ") or "|" not in line:
                    continue
                head, gloss = line.split("|", 1)
                fields = head.split()
                lemma = fields[4].replace("_", " ")
                pairs.append((lemma, gloss.strip()))
    return pairs


def bert_words(text, lowercase):
    """BERT-style words of ASCII-ish text: runs of letters/digits, and single punctuation marks."""
    if lowercase:
        text = text.lower()
    return re.findall(r"[^\W_]+|[^\w\s]|_", text)


def learn_wordpiece(texts, lowercase, size, extra_chars=""):
    """A WordPiece vocabulary: specials, every character seen (alone and as ##c), then the most
    frequent words and word-internal pieces until `size` tokens."""
    words = collections.Counter(w for t in texts for w in bert_words(t, lowercase))
    chars = sorted({c for w in words for c in w} | set(extra_chars))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += chars + ["##" + c for c in chars]
    pieces = collections.Counter()
    for w, n in words.items():
        for k in range(2, min(len(w), 6) + 1):
            pieces["##" + w[-k:]] += n
            if k < len(w):
                pieces[w[:k]] += n
    ranked = [w for w, _ in words.most_common()]
    merged = []
    seen = set(vocab)
    for a, b in zip(ranked, [p for p, _ in pieces.most_common()]):
        for t in (a, b):
            if t not in seen:
                seen.add(t)
                merged.append(t)
    vocab += merged[: max(0, size - len(vocab))]
    return {t: i for i, t in enumerate(vocab)}


def bytes_to_unicode():
    """GPT-2's printable stand-ins for the 256 byte values."""
    shown = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in shown:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


GPT2_SPLIT = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+|_+")


def learn_bpe(texts, merges_wanted):
    """Byte-level BPE: the 256 byte symbols, then `merges_wanted` merges of the most frequent
    adjacent pair (ties: the smaller pair), counted over distinct words with their frequency.
    Each run is a prefix of a longer one: the first N merges of a run to M > N are a run to N."""
    b2u = bytes_to_unicode()
    words = collections.Counter()
    for t in texts:
        for piece in GPT2_SPLIT.findall(t):
            words["".join(b2u[b] for b in piece.encode("utf-8"))] += 1
    seqs = {w: list(w) for w in words}
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for w, s in seqs.items():
        for q in zip(s, s[1:]):
            pairs[q] += words[w]
            where[q].add(w)
    # Flat (-count, a, b) entries: the order of (-count, (a, b)) without a tuple inside a tuple.
    # An entry whose count is no longer the pair's is skipped when it comes up.
    heap = [(-n, a, b) for (a, b), n in pairs.items()]
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    vocab = [b2u[b] for b in range(256)]
    merges = []
    while heap and len(merges) < merges_wanted:
        n, a, b = pop(heap)
        p = (a, b)
        if -n != pairs.get(p, 0) or n == 0:
            continue
        merges.append(p)
        ab = a + b
        vocab.append(ab)
        for w in sorted(where.pop(p, ())):  # sorted: the same merges whatever the set order
            s, k = seqs[w], words[w]
            for q in zip(s, s[1:]):
                pairs[q] -= k
            out, i, last = [], 0, len(s) - 1
            while i <= last:
                if i < last and s[i] == a and s[i + 1] == b:
                    out.append(ab)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
            for q in zip(out, out[1:]):
                pairs[q] += k
                where[q].add(w)
                push(heap, (-pairs[q], q[0], q[1]))
        pairs.pop(p, None)
    return vocab, merges


def added(content, id, special=True, lstrip=False, normalized=False):
    return {"id": id, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": False,
            "normalized": normalized, "special": special}


def tokenizer_json(model, normalizer, pre_tokenizer, post_processor, added_tokens):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer,
            "post_processor": post_processor, "decoder": None, "model": model}


def template(cls_id, sep_id):
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [cls_id], "tokens": ["[CLS]"]},
                               "[SEP]": {"id": "[SEP]", "ids": [sep_id], "tokens": ["[SEP]"]}}}


def wordpiece_tokenizer(texts, lowercase, size, processing):
    """A BERT-family tokenizer.json (uncased: lowercase + accents stripped, or cased)."""
    extra = "éèàüöçñßøåæœ中文字日本語한국어αβγδ" if not lowercase else "中文字日本語한국어αβγδ"
    vocab = learn_wordpiece(texts, lowercase, size, extra)
    specials = [added(t, vocab[t]) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")]
    if processing == "template":
        post = template(vocab["[CLS]"], vocab["[SEP]"])
    else:
        post = {"type": "BertProcessing", "sep": ["[SEP]", vocab["[SEP]"]], "cls": ["[CLS]", vocab["[CLS]"]]}
    normalizer = {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                  "strip_accents": None if lowercase else False, "lowercase": lowercase}
    model = {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
             "max_input_chars_per_word": 100, "vocab": vocab}
    return tokenizer_json(model, normalizer, {"type": "BertPreTokenizer"}, post, specials)


def bpe_tokenizer(texts, merges_wanted, style, learned=None):
    """A byte-level BPE tokenizer.json: "roberta" (<s> </s>, merges as "a b" strings) or "gpt2"
    (NFC, a prefix space, no specials, merges as [a, b] pairs). `learned`: what learn_bpe returned
    for these texts and at least `merges_wanted` merges (its first ones are the same), or None."""
    vocab_list, merges = learned or learn_bpe(texts, merges_wanted)
    vocab_list, merges = vocab_list[: 256 + merges_wanted], merges[:merges_wanted]
    if style == "roberta":
        vocab_list = ["<s>", "<pad>", "</s>", "<unk>"] + vocab_list + ["<mask>"]
    else:
        vocab_list = vocab_list + ["<|endoftext|>"]
    vocab = {}
    for t in vocab_list:
        vocab.setdefault(t, len(vocab))
    if style == "roberta":
        specials = [added("<s>", 0), added("<pad>", 1), added("</s>", 2), added("<unk>", 3),
                    added("<mask>", vocab["<mask>"], lstrip=True)]
        post = {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
                "trim_offsets": True, "add_prefix_space": False}
        model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                 "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                 "vocab": vocab, "merges": [a + " " + b for a, b in merges]}
        return tokenizer_json(model, None, {"type": "ByteLevel", "add_prefix_space": False,
                                            "trim_offsets": True, "use_regex": True}, post, specials)
    specials = [added("<|endoftext|>", vocab["<|endoftext|>"])]
    model = {"type": "BPE", "dropout": None, "unk_token": None, "vocab": vocab,
             "merges": [[a, b] for a, b in merges]}
    return tokenizer_json(model, {"type": "NFC"},
                          {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                          {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                          specials)


def write_json(obj, path):
    """Writes `obj` to `path` through a temporary file beside it: created exclusively under an
    unpredictable name (mkstemp), renamed into place when complete, removed on failure."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # as a file created by open() would be
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
