#!/usr/bin/env bash
# gc-train checkpoints carry a digest of their payload: a checkpoint with any flipped byte either
# is refused on --resume (exit 65) or, where the byte is one nothing reads (zip padding), resumes
# to exactly the same parameters as the intact one. Before the digest, 17 of 20 flips resumed
# with exit 0 and one weight came back as 2.6e37.
source "$(dirname "$0")/../cli/lib.sh"
D=$TC_DATA
ARGS=(--data "$D/pairs.h5" --query q --passage p --encoder "$D/tower.pt" --batch-size 32 --chunk-size 8
      --optimizer sgd --lr 0.1 --seed 3 --threads 1 -q)

run "$TC_BIN/gc-train" "${ARGS[@]}" --steps 4 --checkpoint-dir "$WORK/ck"
expect_rc 0
cp "$WORK/ck/checkpoint.pt" "$WORK/good.pt"
run "$TC_BIN/gc-train" "${ARGS[@]}" --steps 6 --checkpoint-dir "$WORK/ck" --resume --out "$WORK/want.pt"
expect_rc 0

size=$(stat -c %s "$WORK/good.pt")
refused=0
for k in $(seq 1 20); do
  off=$(( (k * 7919 * 104729) % size ))
  mkdir -p "$WORK/f$k"
  cp "$WORK/good.pt" "$WORK/f$k/checkpoint.pt"
  "$TC_PYTHON" -c "
import sys
p, off = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, 'rb').read()); b[off] ^= 0x5a; open(p, 'wb').write(bytes(b))" "$WORK/f$k/checkpoint.pt" "$off"
  run "$TC_BIN/gc-train" "${ARGS[@]}" --steps 6 --checkpoint-dir "$WORK/f$k" --resume --out "$WORK/f$k/out.pt"
  if [ "$rc" -eq 65 ]; then
    refused=$((refused + 1))
    [[ "$err" == "gc-train: error: $WORK/f$k/checkpoint.pt: "* ]] && _ok || _fail "flip at $off: message $err"
    expect_one_line_err
  elif [ "$rc" -eq 0 ]; then
    py_later "True" "
import torch
a = dict(torch.jit.load('$WORK/want.pt').named_parameters()); b = dict(torch.jit.load('$WORK/f$k/out.pt').named_parameters())
print(all(torch.equal(a[n], b[n]) for n in a))"
  else
    _fail "flip at byte $off: exit $rc"
  fi
done
# Most bytes of a checkpoint are payload: nearly every flip must be caught.
[ "$refused" -ge 15 ] && _ok || _fail "only $refused of 20 flipped checkpoints were refused"

echo "checkpoint.test.sh: $refused of 20 flipped checkpoints refused, the rest resumed identically" >&2

# Not a checkpoint at all (or one from before the digest): refused.
mkdir "$WORK/old"
echo "not a checkpoint" > "$WORK/old/checkpoint.pt"
run "$TC_BIN/gc-train" "${ARGS[@]}" --steps 6 --checkpoint-dir "$WORK/old" --resume
expect_rc 65
expect_err "gc-train: error: $WORK/old/checkpoint.pt: unreadable checkpoint (damaged, or written by an older gc-train)"

# The digest is checked before LibTorch is loaded (train/checkpoint_file.h): with no engines module
# to load, a file that is no archive and a flipped payload byte are still refused, each in one line,
# while the intact checkpoint and a zip laid out otherwise (left to LibTorch's reader) get as far
# as loading the module.
export TRAINCACHE_ENGINES_MODULE="$WORK/none.so"
no_module="gc-train: error: LibTorch: cannot load libtraincache_engines.so: $WORK/none.so: cannot open shared object file: No such file or directory"
run "$TC_BIN/gc-train" "${ARGS[@]}" --steps 6 --checkpoint-dir "$WORK/old" --resume
expect_rc 65
expect_err "gc-train: error: $WORK/old/checkpoint.pt: unreadable checkpoint (damaged, or written by an older gc-train)"
mkdir "$WORK/early" "$WORK/other"
cp "$WORK/good.pt" "$WORK/early/checkpoint.pt"
"$TC_PYTHON" -c "
import sys, zipfile
p = sys.argv[1]
with zipfile.ZipFile(p) as z:  # a byte in the middle of the payload member
    i = z.getinfo([n for n in z.namelist() if n.endswith('/data/0')][0])
    off = i.header_offset + 30 + len(i.filename) + len(i.extra) + i.file_size // 2
b = bytearray(open(p, 'rb').read()); b[off] ^= 1; open(p, 'wb').write(bytes(b))
zipfile.ZipFile(sys.argv[2], 'w').writestr('archive/version', '3')" "$WORK/early/checkpoint.pt" "$WORK/other/checkpoint.pt"
run "$TC_BIN/gc-train" "${ARGS[@]}" --steps 6 --checkpoint-dir "$WORK/early" --resume
expect_rc 65
expect_err "gc-train: error: $WORK/early/checkpoint.pt: checkpoint damaged: its contents do not match their digest"
for d in ck other; do
  run "$TC_BIN/gc-train" "${ARGS[@]}" --steps 6 --checkpoint-dir "$WORK/$d" --resume
  expect_rc 69
  expect_err "$no_module"
done
unset TRAINCACHE_ENGINES_MODULE
run "$TC_BIN/gc-train" "${ARGS[@]}" --steps 6 --checkpoint-dir "$WORK/other" --resume
expect_rc 65
expect_err "gc-train: error: $WORK/other/checkpoint.pt: unreadable checkpoint (damaged, or written by an older gc-train)"

finish
