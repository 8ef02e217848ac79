#!/usr/bin/env bash
# make demo: precompute, then train, end to end on the real Fashion-MNIST data (70,000 images).
#   1. convert Debian's Fashion-MNIST to HDF5 and export a frozen TorchScript CNN (fixed seed)
#   2. cache-fill: encode all images once into an HDF5 embedding cache
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

if [ ! -f "$DATA/fashion.h5" ]; then
  say "converting /usr/share/datasets/fashion-mnist to $DATA/fashion.h5"
  scripts/fashion-mnist-to-h5 "$DATA/fashion.h5"
fi
if [ ! -f "$DATA/cnn.pt" ]; then
  say "exporting the demo encoders (TorchScript, seed 0)"
  scripts/export-encoders "$DATA"
fi

say "cache-fill: encoding 70,000 images with the frozen CNN"
"$BIN/cache-fill" --input "$DATA/fashion.h5" --encoder cnn="$DATA/cnn.pt" --features images \
  --labels labels --key ids --out "$DATA/cache.h5" --force

say "cache-inspect --stats"
"$BIN/cache-inspect" --stats "$DATA/cache.h5"

say "cache-inspect --check (exit status 0 = sound)"
"$BIN/cache-inspect" --check -v "$DATA/cache.h5"

say "cache-inspect --verify 64: re-encode 64 random rows and compare with the cache"
"$BIN/cache-inspect" --verify 64 "$DATA/cache.h5"

say "cache-fill again with the same inputs: nothing to do"
"$BIN/cache-fill" --input "$DATA/fashion.h5" --encoder cnn="$DATA/cnn.pt" --features images \
  --labels labels --key ids --out "$DATA/cache.h5"

say "gc-train: a supervised-contrastive head on the cached embeddings (batch 1024 in chunks of 256;"
say "held out: rows 60000..70000, the Fashion-MNIST test split; the raw data is not read again)"
"$BIN/gc-train" --cache "$DATA/cache.h5" --embeddings cnn --head mlp:256,64 --batch-size 1024 \
  --chunk-size 256 --epochs 5 --lr 2e-3 --temperature 0.1 --warmup-steps 20 --schedule cosine \
  --eval-rows 60000:70000 --out "$DATA/head.pt" --metrics "$DATA/train.jsonl"

say "done: cache $DATA/cache.h5 (h5py: docs/cache-format.md), trained head $DATA/head.pt (torch.jit.load),"
say "per-step metrics $DATA/train.jsonl"
