#!/usr/bin/env bash
# Tokenizer parity: traincache's token ids are identical to Hugging Face's tokenizers (the Rust
# library, from PyPI: its ids committed, hf_ids in lib.sh; live in make test-pip and make
# test-tokenizers) for every tokenizer.json kind, and to
# python3-sentencepiece for SentencePiece models, on 10,000 seeded strings (accents, CJK, emoji,
# controls, whitespace runs, special-token spellings, texts longer than --max-length), with and
# without truncation.
source "$(dirname "$0")/lib.sh"
T=$TC_DATA/tokenizers
S=$WORK/strings.jsonl

run "$TC_PYTHON" "$TC_SOURCE/tests/cli/text_strings.py" "$S" 10000 1
expect_rc 0
expect_eq "$(wc -l < "$S")" 10000 "strings written"

# The committed ids are found by the SHA-256 of both files, so other strings (or a changed fixture)
# have none rather than stale ones; each stored file holds what its provenance record says.
if [ -z "${TRAINCACHE_TOKENIZERS:-}" ]; then
  printf '"x"\n' >"$WORK/other.jsonl"
  run hf_ids "$T/bert-uncased.json" "$WORK/other.jsonl"
  expect_rc 1
  key=$(sha256sum "$T/bert-uncased.json" | cut -c1-16)-$(sha256sum "$WORK/other.jsonl" | cut -c1-16)
  expect_err "tokenizer_reference: error: no committed tokenizers ids for bert-uncased.json on other.jsonl ($key): the fixture or the strings changed; scripts/make-tokenizer-reference remakes them"
  py "
import glob, gzip, json, os
bad = []
for meta in sorted(glob.glob('$TC_SOURCE/tests/data/hf-reference/*.json')):
    m = json.load(open(meta))
    name = meta[:-5]
    ids = gzip.open(name + '.ids.gz').read().decode().split('\n')[:-1]
    ok = os.path.basename(name) == m['tokenizer_sha256'][:16] + '-' + m['strings_sha256'][:16]
    ok = ok and len(ids) == m['lines'] and all(isinstance(json.loads(l), list) for l in ids)
    bad += [] if ok else [os.path.basename(meta)]
print(len(glob.glob('$TC_SOURCE/tests/data/hf-reference/*.ids.gz')) >= 8, bad)
"
  expect_out "True []"
fi

# Tokens of one sequence: specials before and after (of the single-sequence template).
declare -A BEFORE=([bert-uncased]=1 [bert-cased]=1 [roberta-bpe]=1 [gpt2-bpe]=0)
declare -A AFTER=([bert-uncased]=1 [bert-cased]=1 [roberta-bpe]=1 [gpt2-bpe]=0)

# truncate REF OUT B A MAX: the reference ids cut as Hugging Face truncates one sequence.
truncate_ids() {
  "$TC_PYTHON" -c "
import json, sys
b, a, m = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
with open(sys.argv[2], 'w') as out:
    for line in open(sys.argv[1]):
        ids = json.loads(line)
        head, body, tail = ids[:b], ids[b:len(ids) - a], ids[len(ids) - a:]
        out.write(json.dumps(head + body[:m - b - a] + tail, separators=(',', ':')) + '\n')
" "$@"
}

for t in bert-uncased bert-cased roberta-bpe gpt2-bpe; do
  run hf_ids "$T/$t.json" "$S"
  expect_rc 0
  printf '%s\n' "$out" > "$WORK/hf-$t.txt"
  run "$TC_BIN/tokenize-bench" "$T/$t.json" "$S" --dump
  expect_rc 0
  printf '%s\n' "$out" > "$WORK/tc-$t.txt"
  expect_same "$WORK/hf-$t.txt" "$WORK/tc-$t.txt"
  "$TC_PYTHON" -c "
import json, sys
a = open(sys.argv[1]).read().split('\n'); b = open(sys.argv[2]).read().split('\n')
bad = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
n = sum(len(json.loads(x)) for x in a if x)
print(len(a) == len(b), len(bad), n > 100000, 'first differing lines:', bad[:5])
" "$WORK/hf-$t.txt" "$WORK/tc-$t.txt" > "$WORK/cmp.txt"
  expect_eq "$(cat "$WORK/cmp.txt")" "True 0 True first differing lines: []" "$t"
  # Truncation to 24 tokens (special tokens included): long texts are cut, short ones kept.
  truncate_ids "$WORK/hf-$t.txt" "$WORK/hf24-$t.txt" "${BEFORE[$t]}" "${AFTER[$t]}" 24
  run "$TC_BIN/tokenize-bench" "$T/$t.json" "$S" --dump --max-length 24
  printf '%s\n' "$out" > "$WORK/tc24-$t.txt"
  expect_same "$WORK/hf24-$t.txt" "$WORK/tc24-$t.txt"
done

# SentencePiece's reference is Debian's python3-sentencepiece 0.1.97 (in /usr/bin/python3, also in
# make test-pip): PyPI's 0.2.3 orders the pieces of 17 of these strings differently with the unigram
# model (equal scores; docs/text.md), which traincache does not follow yet.
SPM_PYTHON=/usr/bin/python3
"$SPM_PYTHON" -c 'import sentencepiece' 2>/dev/null || SPM_PYTHON=$TC_PYTHON
for t in spm-unigram spm-bpe; do
  "$SPM_PYTHON" -c "
import json, sys
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
for line in open(sys.argv[2]):
    print(json.dumps(sp.encode(json.loads(line)), separators=(',', ':')))
" "$T/$t.model" "$S" > "$WORK/py-$t.txt"
  run "$TC_BIN/tokenize-bench" "$T/$t.model" "$S" --dump
  expect_rc 0
  printf '%s\n' "$out" > "$WORK/tc-$t.txt"
  expect_same "$WORK/py-$t.txt" "$WORK/tc-$t.txt"
  truncate_ids "$WORK/py-$t.txt" "$WORK/py24-$t.txt" 0 0 24
  run "$TC_BIN/tokenize-bench" "$T/$t.model" "$S" --dump --max-length 24
  printf '%s\n' "$out" > "$WORK/tc24-$t.txt"
  expect_same "$WORK/py24-$t.txt" "$WORK/tc24-$t.txt"
done

# The strings hold what the issue asks for (a check of the generator itself).
"$TC_PYTHON" -c "
import json, sys, unicodedata as u
S = [json.loads(l) for l in open(sys.argv[1])]
has = lambda f: sum(any(f(c) for c in s) for s in S)
print(has(lambda c: u.category(c) == 'Mn') > 100, has(lambda c: 0x4E00 <= ord(c) <= 0x9FFF) > 500,
      has(lambda c: ord(c) >= 0x1F300) > 300, has(lambda c: u.category(c) == 'Cc' and c not in '\t\n\r') > 300,
      sum('   ' in s or '\t\t' in s for s in S) > 100, sum(len(s) > 300 for s in S) >= 190,
      sum('[CLS]' in s or '<mask>' in s for s in S) > 50, has(lambda c: c in '\xc0\xe9\xf1\xfc') > 200)
" "$S" > "$WORK/kinds.txt"
expect_eq "$(cat "$WORK/kinds.txt")" "True True True True True True True True" "string kinds"
finish
