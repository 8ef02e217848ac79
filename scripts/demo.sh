#!/usr/bin/env bash
# make demo: precompute, then train, end to end on the real Fashion-MNIST data (70,000 images).
#   1. write Debian's Fashion-MNIST as 70,000 PNG files (ImageFolder layout) with a CSV manifest,
#      and export a frozen TorchScript CNN (fixed seed)
#   2. cache-fill: decode and encode all images once, straight from the files, into an HDF5
#      embedding cache (the manifest keeps the dataset's order, so the test split is rows 60000..)
#   3. cache-inspect: summary with statistics, --check, and --verify against the encoder
#   4. cache-fill again: a fast no-op, because the fingerprint is unchanged
#   5. gc-train: train a head on the cached embeddings with gradient caching; nearest-neighbour
#      accuracy on the held-out test split before and after, and the time per epoch
set -euo pipefail
BUILD=${1:-build}
BIN=$BUILD/bin
DATA=$BUILD/demo
mkdir -p "$DATA"
say() { printf '\n== %s\n' "$*" >&2; }

if [ ! -f "$DATA/fashion-png/fashion.csv" ]; then
  say "writing /usr/share/datasets/fashion-mnist as PNG files and a manifest in $DATA/fashion-png"
  scripts/fashion-mnist-to-png "$DATA/fashion-png"
fi
if [ ! -f "$DATA/cnn.pt" ]; then
  say "exporting the demo encoders (TorchScript, seed 0)"
  scripts/export-encoders "$DATA"
fi

say "cache-fill: decoding 70,000 PNG files (listed by fashion.csv) and encoding them with the frozen CNN"
"$BIN/cache-fill" --input "$DATA/fashion-png/fashion.csv" --features path --labels class --key id \
  --channels gray --encoder cnn="$DATA/cnn.pt" --out "$DATA/cache.h5" --force

say "cache-inspect --stats"
"$BIN/cache-inspect" --stats "$DATA/cache.h5"

say "cache-inspect --check (exit status 0 = sound)"
"$BIN/cache-inspect" --check -v "$DATA/cache.h5"

say "cache-inspect --verify 64: re-encode 64 random rows and compare with the cache"
"$BIN/cache-inspect" --verify 64 "$DATA/cache.h5"

say "cache-fill again with the same inputs: nothing to do"
"$BIN/cache-fill" --input "$DATA/fashion-png/fashion.csv" --features path --labels class --key id \
  --channels gray --encoder cnn="$DATA/cnn.pt" --out "$DATA/cache.h5"

say "gc-train: a supervised-contrastive head on the cached embeddings (batch 1024 in chunks of 256;"
say "held out: rows 60000..70000, the Fashion-MNIST test split; the raw data is not read again)"
"$BIN/gc-train" --cache "$DATA/cache.h5" --embeddings cnn --head mlp:256,64 --batch-size 1024 \
  --chunk-size 256 --epochs 5 --lr 2e-3 --temperature 0.1 --warmup-steps 20 --schedule cosine \
  --eval-rows 60000:70000 --out "$DATA/head.pt" --metrics "$DATA/train.jsonl"

say "done: cache $DATA/cache.h5 (h5py: docs/cache-format.md), trained head $DATA/head.pt (torch.jit.load),"
say "per-step metrics $DATA/train.jsonl"
