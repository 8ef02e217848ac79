#!/usr/bin/env bash
# make demo-text (the second part of make demo): text end to end on Debian's WordNet.
#   1. word -> gloss pairs (86,826, one per lemma, shuffled with a fixed seed) as JSON Lines; a
#      WordPiece tokenizer.json learned from the glosses; a small text encoder (TorchScript,
#      fixed seed, random weights)
#   2. cache-fill: tokenize and encode every gloss once with the frozen encoder, in length windows
#   3. cache-inspect: the text input and its tokenizer, and --verify (re-tokenize, re-encode)
#   4. gc-train raw mode on the text: train the encoder on word -> gloss retrieval with gradient
#      caching (batch 512 in chunks of 64, each chunk padded to its own longest text); recall@1,
#      recall@10 and MRR of the 2,000 held-out words against their 2,000 glosses, before and after
#   5. cache-fill with the trained encoder: the glosses' embeddings, ready to search
. "$(dirname "$0")/help.sh"
set -euo pipefail
BUILD=${1:-build}
# The scripts run with the Python the build found (the one with torch: TRAINCACHE_PYTHON), not
# whichever python3 is first on PATH (a pyenv or conda one without it).
py=$(sed -n 's/^TRAINCACHE_PYTHON:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
[ -n "$py" ] && PATH="$(dirname "$py"):$PATH"
BIN=$BUILD/bin
DATA=$BUILD/demo/text
mkdir -p "$DATA"
say() { printf '\n== %s\n' "$*" >&2; }

[ -f "$DATA/pairs.jsonl" ] || scripts/wordnet-pairs "$DATA/pairs.jsonl"
say "tokenizers learned from the WordNet glosses (scripts/make-tokenizers; rebuilt only when missing)"
scripts/make-tokenizers "$DATA/tokenizers"
TOK=$DATA/tokenizers/bert-uncased.json
[ -f "$DATA/text.pt" ] || scripts/export-encoders "$DATA"
rows=$(wc -l <"$DATA/pairs.jsonl")
held=$((rows - 2000))

say "cache-fill: every gloss tokenized (WordPiece, at most 64 tokens) and encoded by the frozen encoder"
"$BIN/cache-fill" --input "$DATA/pairs.jsonl" --text gloss --tokenizer "$TOK" --max-length 64 \
  --encoder text="$DATA/text.pt" --key word --out "$DATA/glosses.h5" --force

say "cache-inspect, and --verify 32: re-tokenize and re-encode 32 random rows"
"$BIN/cache-inspect" "$DATA/glosses.h5"
"$BIN/cache-inspect" --verify 32 "$DATA/glosses.h5"

say "gc-train: word -> gloss retrieval, batch 512 in chunks of 64 (one epoch); held out: the last 2,000 pairs"
"$BIN/gc-train" --data "$DATA/pairs.jsonl" --query word --passage gloss --tokenizer "$TOK" --max-length 64 \
  --encoder "$DATA/text.pt" --batch-size 512 --chunk-size 64 --epochs 1 --lr 5e-3 --warmup-steps 10 \
  --schedule cosine --temperature 0.05 --eval-rows "$held:" --out "$DATA/text-trained.pt" \
  --metrics "$DATA/train.jsonl"

say "cache-fill with the trained encoder: the glosses' embeddings for search"
"$BIN/cache-fill" --input "$DATA/pairs.jsonl" --text gloss --tokenizer "$TOK" --max-length 64 \
  --encoder text="$DATA/text-trained.pt" --key word --out "$DATA/index.h5" --force -q

say "done: pairs $DATA/pairs.jsonl, tokenizer $TOK, trained encoder $DATA/text-trained.pt,"
say "gloss embeddings $DATA/index.h5 (keys: the words), per-step metrics $DATA/train.jsonl"
