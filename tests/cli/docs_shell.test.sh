#!/usr/bin/env bash
# The shell examples of the tool pages run as written (issue 43, item 23: cache-inspect.md's
# `--export npy vectors/ ... cache.h5` failed as written), as docs_examples.py runs docs/python.md.
# Each page's ```sh blocks are read from the page itself, so a changed example is what runs. The
# files the examples name (data.h5, pairs.h5, cnn.pt, ...) are made here, small, in a scratch folder
# per example; each example's commands must all exit 0. gc-train's examples train on far more rows
# than a test has: their batch, chunk, step and evaluation sizes are scaled down by options
# appended to each gc-train command (a repeated option takes its last value), every other option
# as written.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
tools_path  # the tools as a user names them, served (lib.sh)
export PATH="$TOOLS_PATH:$PATH"

# The files the examples name.
mkdir -p "$WORK/files/caches" "$WORK/text"
cp "$D/cnn.pt" "$WORK/files/cnn.pt"
cp "$D/text.pt" "$WORK/files/text.pt"
cat >"$WORK/files/make.py" <<PYEOF
import h5py, numpy as np, torch
src = h5py.File("$D/images.h5")
tok = h5py.File("$D/tokens.h5")
n = 200
for name in ("data.h5", "pairs.h5"):
    with h5py.File("$WORK/files/" + name, "w") as f:
        f["images"] = src["images"][:n]
        f["labels"] = src["labels"][:n]
        f["names"] = np.array([f"img-{i:04d}" for i in range(n)], dtype=h5py.string_dtype())
        f["input_ids"] = tok["input_ids"][:n]
        f["attention_mask"] = tok["attention_mask"][:n]

class Pooled(torch.nn.Module):  # a model returning a dict, as docs/cache-fill.md's third example
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(1000, 8)
    def forward(self, input_ids: torch.Tensor):
        h = self.emb(input_ids)
        return {"pooled": h.mean(1), "tokens": h}

torch.jit.script(Pooled().eval()).save("$WORK/files/model.pt")

# gc-train.md and text.md: text pairs with two hard negatives each, and the same as token ids.
import json
rng = np.random.default_rng(3)
words = ["cat", "dog", "bird", "fish", "tree", "stone", "river", "cloud"]
with open("$WORK/text/pairs.jsonl", "w") as f:
    for i in range(48):
        w, g, a, b = (words[(i + k) % 8] for k in range(4))
        f.write(json.dumps({"word": f"{w} {i}", "gloss": f"a {g} seen {i}", "negs": [f"a {a}", f"the {b}"],
                            "query": f"{w} {i}", "passage": f"a {g} seen {i}"}) + "\n")
with h5py.File("$WORK/text/pairs.h5", "w") as f:
    for side, shape in (("q", (48, 8)), ("p", (48, 8)), ("n", (48, 2, 8))):  # two negatives a row
        f[side + "_ids"] = rng.integers(1, 1000, size=shape, dtype=np.int64)
        f[side + "_mask"] = np.ones(shape, np.int64)
PYEOF
run "$TC_PYTHON" "$WORK/files/make.py"
expect_rc 0
cp "$D/text4k_nodrop.pt" "$WORK/text/text.pt"
cp "$D/tokenizers/bert-uncased.json" "$WORK/text/tokenizer.json"
cp "$WORK/files/data.h5" "$D/cnn.pt" "$WORK/text/"

# examples PAGE: the text of the page's ```sh blocks (a blank line after each).
examples() {
  awk '/^```sh/{p=1; next} /^```/{if (p) print ""; p=0; next} p' "$TC_SOURCE/docs/$1"
}

# gc-train scaled down: options appended after the example's own (the last value counts).
SCALED_GC_TRAIN='gc-train() {
  local extra=(-b 8 -c 4 -q)
  [[ " $* " == *" --epochs "* ]] && extra+=(--epochs 1)
  [[ " $* " == *" --steps "* ]] && extra+=(--steps 3)
  [[ " $* " == *" --eval-rows "* ]] && extra+=(--eval-rows 24:)
  [[ " $* " == *" --warmup-steps "* ]] && extra+=(--warmup-steps 1)
  [[ " $* " == *" --checkpoint-every "* ]] && extra+=(--checkpoint-every 2)
  command gc-train "$@" "${extra[@]}"
}'

# run_example NAME SETUP TEXT [FILES]: TEXT in a fresh copy of FILES (default: files) after SETUP,
# with bash -e.
run_example() {
  local dir="$WORK/ex.$1"
  rm -rf "$dir"
  cp -r "$WORK/${4:-files}" "$dir"
  (cd "$dir" && eval "$2") || _fail "$1: its setup failed"
  run bash -e -o pipefail -c "$SCALED_GC_TRAIN
cd '$dir' && $3"
  if [ "$rc" -eq 0 ]; then _ok; else _fail "$1 failed as written (exit $rc): $3"$'\n'"$err"; fi
}

# cache-fill.md: each example (the lines between blank lines) on its own.
k=0
while IFS= read -r -d '' ex; do
  k=$((k + 1))
  run_example "cache-fill.$k" ":" "$ex"
done < <(examples cache-fill.md | awk -v RS= '{printf "%s%c", $0, 0}')
expect_eq "$k" 3 "cache-fill.md's examples"

# cache-inspect.md: one block over a cache and a folder of caches (as the page assumes).
CACHES='cache-fill -q -i data.h5 -e cnn=cnn.pt -f images --labels labels -o cache.h5 &&
        cp cache.h5 caches/a.h5 && cp cache.h5 caches/b.h5'
run_example cache-inspect "$CACHES" "$(examples cache-inspect.md)"
expect_file "$WORK/ex.cache-inspect/vectors/cnn/cnn_00000.npy"

# gc-train.md and text.md: each example on its own, on the text files.
for page in gc-train text; do
  k=0
  while IFS= read -r -d '' ex; do
    k=$((k + 1))
    # encoder.pt: an image encoder in gc-train.md, a text encoder in text.md.
    run_example "$page.$k" "cp $([ $page = gc-train ] && echo cnn.pt || echo text.pt) encoder.pt" "$ex" text
  done < <(examples $page.md | awk -v RS= '{printf "%s%c", $0, 0}')
  expect_eq "$k" "$([ $page = gc-train ] && echo 3 || echo 1)" "$page.md's examples"
done
expect_file "$WORK/ex.gc-train.3/ckpt/checkpoint.pt"
finish
