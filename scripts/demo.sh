#!/usr/bin/env bash
# make demo: the precompute step end to end on the real Fashion-MNIST data (70,000 images).
#   1. convert Debian's Fashion-MNIST to HDF5 and export a frozen TorchScript CNN (fixed seed)
#   2. cache-fill: encode all images once into an HDF5 embedding cache
#   3. cache-inspect: summary with statistics, --check, and --verify against the encoder
#   4. cache-fill again: a fast no-op, because the fingerprint is unchanged
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

say "done: the cache is $DATA/cache.h5 (read it with h5py: see docs/cache-format.md)"
