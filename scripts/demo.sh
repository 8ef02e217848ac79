#!/usr/bin/env bash
# make demo: the workflow traincache is for, end to end on the real Fashion-MNIST data (70,000
# images written as PNG files):
#   1. write Debian's Fashion-MNIST as PNG files (ImageFolder layout) with a CSV manifest, and
#      export a randomly initialised TorchScript CNN (fixed seed)
#   2. gc-train, raw grouped mode: pretrain the CNN briefly (2 epochs, softmax classifier, gradient
#      caching) on a third of the training images, decoded straight from their files
#   3. cache-fill: freeze it and encode all 70,000 images once, with the pretrained and, for
#      comparison, the random CNN (the manifest keeps the dataset's order: the test split is rows
#      60000..69999)
#   4. cache-inspect: summary with statistics, --check, and --verify against the encoders
#   5. cache-fill again: a fast no-op, because the fingerprint is unchanged
#   6. gc-train: an ArcFace head on each encoder's cached embeddings of the 60,000 training images
#      (the raw images are not read again), evaluated on the test split before, during and after
#      training with 95% bootstrap intervals; scripts/plot-train draws both runs' curves
. "$(dirname "$0")/help.sh"
set -euo pipefail
BUILD=${1:-build}
# The scripts run with the Python the build found (the one with torch: TRAINCACHE_PYTHON), not
# whichever python3 is first on PATH (a pyenv or conda one without it).
py=$(sed -n 's/^TRAINCACHE_PYTHON:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
[ -n "$py" ] && PATH="$(dirname "$py"):$PATH"
BIN=$BUILD/bin
DATA=$BUILD/demo
PNG=$DATA/fashion-png
mkdir -p "$DATA"
say() { printf '\n== %s\n' "$*" >&2; }

if [ ! -f "$PNG/fashion.csv" ]; then
  say "writing /usr/share/datasets/fashion-mnist as PNG files and a manifest in $PNG"
  scripts/fashion-mnist-to-png "$PNG"
fi
if [ ! -f "$DATA/cnn.pt" ]; then
  say "exporting the demo encoders (TorchScript, seed 0)"
  scripts/export-encoders "$DATA"
fi
# pretrain.csv: the first 20,000 rows of the manifest (training images of every class).
/usr/bin/python3 - "$PNG" <<'PY'
import os, sys, tempfile
png = sys.argv[1]
with open(os.path.join(png, "fashion.csv")) as f:
    lines = f.readlines()[:20001]
fd, tmp = tempfile.mkstemp(prefix=".pretrain.csv", dir=png)
with os.fdopen(fd, "w") as f:
    f.writelines(lines)
os.replace(tmp, os.path.join(png, "pretrain.csv"))
PY

say "gc-train (raw grouped): pretrain the CNN on 20,000 training images decoded from their PNG files;"
say "a softmax classifier over the 10 classes, batch 512 in chunks of 128, 2 epochs"
"$BIN/gc-train" --data "$PNG/pretrain.csv" --query path --labels class --channels gray --encoder "$DATA/cnn.pt" \
  --loss softmax --batch-size 512 --chunk-size 128 --epochs 2 --lr 2e-3 --warmup-steps 5 --schedule cosine \
  --eval-split 0.05 --stratify --out "$DATA/cnn-pretrained.pt" --metrics "$DATA/pretrain.jsonl"

say "cache-fill: freeze the pretrained CNN and encode all 70,000 images, decoded once from the files"
say "(the random CNN too, for comparison)"
FILL=(--input "$PNG/fashion.csv" --features path --labels class --key id --channels gray
      --encoder pretrained="$DATA/cnn-pretrained.pt" --encoder random="$DATA/cnn.pt" --out "$DATA/cache.h5")
"$BIN/cache-fill" "${FILL[@]}" --force

say "cache-inspect --stats"
"$BIN/cache-inspect" --stats "$DATA/cache.h5"

say "cache-inspect --check (exit status 0 = sound)"
"$BIN/cache-inspect" --check -v "$DATA/cache.h5"

say "cache-inspect --verify 64: re-encode 64 random rows and compare with the cache"
"$BIN/cache-inspect" --verify 64 "$DATA/cache.h5"

say "cache-fill again with the same inputs: nothing to do"
"$BIN/cache-fill" "${FILL[@]}"

# An ArcFace head on one encoder's embeddings of the training split; the test split (rows
# 60000..) is evaluated before training, every 50 steps and after, with 95% intervals.
train_head() {
  "$BIN/gc-train" --cache "$DATA/cache.h5" --embeddings "$1" --head mlp:256,64 --loss arcface --scale 16 \
    --batch-size 1024 --chunk-size 256 --epochs 4 --lr 2e-3 --warmup-steps 10 --schedule cosine \
    --eval-rows 60000: --eval-bootstrap 1000 --eval-every 50 --eval-k 1,5 --out "$DATA/head-$1.pt" \
    --classifier-out "$DATA/classifier-$1.pt" --metrics "$DATA/head-$1.jsonl" --json >"$DATA/head-$1.json"
}
say "gc-train: an ArcFace head on the pretrained CNN's cached embeddings (the test split held out)"
train_head pretrained
say "gc-train: the same head on the random CNN's embeddings, for comparison"
train_head random

scripts/plot-train "$DATA/head-pretrained.jsonl" "$DATA/head-random.jsonl" --label "pretrained CNN" \
  --label "random CNN" --metric precision_at_1 --metric map_at_r --metric accuracy_at_1 \
  --title "ArcFace heads on cached Fashion-MNIST embeddings (test split)" -o "$DATA/curves.png"

say "test split (10,000 images): before -> after training the head, [95% interval]"
/usr/bin/python3 - "$DATA" <<'PY'
import json, os, sys
d = sys.argv[1]
print(f"{'embeddings':<12}{'metric':<16}{'before':>28}{'after':>28}")
for enc in ("pretrained", "random"):
    j = json.load(open(os.path.join(d, f"head-{enc}.json")))
    for m in ("precision_at_1", "map_at_r", "accuracy_at_1"):
        cell = lambda e: f"{e[m]:.4f} [{e['ci95'][m][0]:.4f}, {e['ci95'][m][1]:.4f}]"
        print(f"{enc:<12}{m:<16}{cell(j['eval_before']):>28}{cell(j['eval_after']):>28}")
PY

say "done: pretrained encoder $DATA/cnn-pretrained.pt, cache $DATA/cache.h5 (h5py: docs/cache-format.md),"
say "heads $DATA/head-*.pt and classifiers $DATA/classifier-*.pt (torch.jit.load), curves $DATA/curves.png"
