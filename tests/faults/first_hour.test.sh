#!/usr/bin/env bash
# What a hostile test and new users broke (issue 29), each case here failing before its fix:
# --on-error skip with encoders that compute (the suite's skip tests used an encoder that returns
# a view of its input, which hid an in-place update of an inference tensor); FIFOs and link loops
# named x.png, in a folder and in a manifest, never opened blocking; a tokenizer.json nested
# 50,000 levels deep; and the rest of the issue's items 1-14 that a tool run shows. Elsewhere:
# 2 in symlinks.test.sh (--metrics/--batch-log links), 5 in tests/python (slab_interop: a slab
# truncated in use; shared_cache: in-place ops on got tensors), 12 in journal.test.sh (digests).
source "$(dirname "$0")/../cli/lib.sh"
D=$TC_DATA

# An image folder of 28x28 grey PNGs (the fixture images), two classes of 6.
py "
import h5py, os
from PIL import Image
imgs = h5py.File('$D/images.h5')['images'][:12, 0]
for i, a in enumerate(imgs):
    os.makedirs('$WORK/ok/c%d' % (i % 2), exist_ok=True)
    Image.fromarray(a).save('$WORK/ok/c%d/%02d.png' % (i % 2, i))
"
expect_rc 0
cp -r "$WORK/ok" "$WORK/bad"
FILL=(--channels gray --threads 2 -q)

# ---- 1. --on-error skip with an encoder that computes (a convolution and a linear layer) ---------
printf 'not a png' > "$WORK/bad/c0/03.png"     # undecodable: between good rows
ln -s loop.png "$WORK/bad/c1/loop.png"          # a link to itself
mkfifo "$WORK/bad/c1/x.png"                     # a FIFO: never opened blocking
run timeout 60 "$TC_BIN/cache-fill" --input "$WORK/bad" --encoder cnn="$D/cnn.pt" "${FILL[@]}" --on-error skip \
  --out "$WORK/skip.h5"
expect_rc 0
run timeout 60 "$TC_BIN/cache-fill" --input "$WORK/ok" --encoder cnn="$D/cnn.pt" "${FILL[@]}" --out "$WORK/ref.h5"
expect_rc 0
# The skipped rows are zeros with their reasons; every other row equals the clean folder's, by key
# (within 1e-6: the two fills run the convolution on batches of other sizes).
py "
import h5py, numpy as np
s, r = h5py.File('$WORK/skip.h5'), h5py.File('$WORK/ref.h5')
keys = [k.decode() for k in s['keys'][:]]
ref = dict(zip([k.decode() for k in r['keys'][:]], r['embeddings/cnn'][:]))
skipped = {keys[i]: why.decode().split(': ', 1)[1] for i, why in zip(s['skipped/rows'][:], s['skipped/reasons'][:])}
emb = s['embeddings/cnn'][:]
same = all(np.allclose(emb[i], ref[k], rtol=0, atol=1e-6) for i, k in enumerate(keys) if k not in skipped)
zero = all((emb[keys.index(k)] == 0).all() for k in skipped)
print(len(keys), sorted(skipped.items()), same, zero, s['labels'][:].tolist())
"
expect_out "15 [('c0/03.png', 'unsupported image format (not an image); only JPEG and PNG are supported'), ('c1/loop.png', 'too many levels of symbolic links'), ('c1/x.png', 'not a regular file (a FIFO)')] True True [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]"

# Without --on-error skip: the FIFO and the link loop are refused at once with the read side's
# code (66, was 74 for the loop and a hang for the FIFO), naming the file and --on-error skip.
rm "$WORK/bad/c0/03.png"
cp "$WORK/ok/c0/02.png" "$WORK/bad/c0/03.png"
run timeout 60 "$TC_BIN/cache-fill" --input "$WORK/bad" --encoder cnn="$D/cnn.pt" "${FILL[@]}" --out "$WORK/x.h5"
expect_rc 66
expect_err "cache-fill: error: $WORK/bad/c1/loop.png: too many levels of symbolic links (--on-error skip stores a zero row for it and goes on)"
rm "$WORK/bad/c1/loop.png"
run timeout 60 "$TC_BIN/cache-fill" --input "$WORK/bad" --encoder cnn="$D/cnn.pt" "${FILL[@]}" --out "$WORK/x.h5"
expect_rc 66
expect_err "cache-fill: error: $WORK/bad/c1/x.png: not a regular file (a FIFO) (--on-error skip stores a zero row for it and goes on)"
expect_no_file "$WORK/x.h5"

# The same from a manifest: a FIFO, a missing file and a link loop.
ln -s loop.png "$WORK/bad/loop.png"
printf 'file,label\nbad/c0/00.png,a\nbad/c1/x.png,b\nbad/c1/01.png,b\n' > "$WORK/fifo.csv"
printf 'file,label\nbad/c0/00.png,a\nbad/c1/x.png,b\nbad/nope.png,a\nbad/loop.png,b\nbad/c1/01.png,b\n' > "$WORK/m.csv"
run timeout 60 "$TC_BIN/cache-fill" --input "$WORK/fifo.csv" --features file --labels label \
  --encoder cnn="$D/cnn.pt" "${FILL[@]}" --out "$WORK/m.h5"
expect_rc 66
expect_err "cache-fill: error: $WORK/fifo.csv:3: bad/c1/x.png: not a regular file (a FIFO) (--on-error skip stores a zero row for it and goes on)"
run timeout 60 "$TC_BIN/cache-fill" --input "$WORK/m.csv" --features file --labels label \
  --encoder cnn="$D/cnn.pt" "${FILL[@]}" --out "$WORK/m.h5" --on-error skip
expect_rc 0
py "
import h5py
f = h5py.File('$WORK/m.h5')
e = f['embeddings/cnn'][:]
print(f['skipped/rows'][:].tolist(), f['labels'][:].tolist(), [r.decode().split(': ')[-1] for r in f['skipped/reasons'][:]],
      bool((e[[1, 2, 3]] == 0).all()), bool((e[[0, 4]] != 0).any(1).all()))
"
expect_out "[1, 2, 3] [0, 1, 0, 1, 1] ['not a regular file (a FIFO)', 'no such file or directory', 'too many levels of symbolic links'] True True"

# ---- 4. a tokenizer.json nested 50,000 levels deep: 65 naming the file, no crash -----------------
py "
import json
t = json.load(open('$D/tokenizers/bert-uncased.json'))
deep = '[' * 50000 + ']' * 50000
open('$WORK/deep.json', 'w').write(json.dumps(t)[:-1] + ', \"extra\": ' + deep + '}')
open('$WORK/deep_model.json', 'w').write(json.dumps(t).replace('\"model\": {', '\"model\": {\"x\": ' + deep + ', ', 1))
"
printf '{"t": "a few words"}\n' > "$WORK/t.jsonl"
for tok in deep deep_model; do
  run timeout 60 "$TC_BIN/cache-fill" --input "$WORK/t.jsonl" --text t --tokenizer "$WORK/$tok.json" \
    --encoder "$D/text.pt" --out "$WORK/t.h5" -q
  expect_rc 65
  expect_err "cache-fill: error: $WORK/$tok.json: JSON nested deeper than 64 levels"
done
# A JSON Lines manifest line nested as deep: the same refusal, naming the line.
py "open('$WORK/deep.jsonl', 'w').write('{\"t\": \"a\"}\n{\"t\": ' + '[' * 50000 + ']' * 50000 + '}\n')"
run timeout 60 "$TC_BIN/cache-fill" --input "$WORK/deep.jsonl" --text t --tokenizer "$D/tokenizers/bert-uncased.json" \
  --encoder "$D/text.pt" --out "$WORK/t.h5" -q
expect_rc 65
expect_err "cache-fill: error: $WORK/deep.jsonl:2: JSON nested deeper than 64 levels"
expect_no_file "$WORK/t.h5"

# ---- 9. a --max-length shorter than the special tokens, an invalid truncation length ------------
# --max-length 1 gave the untruncated embeddings: 1 - 2 special tokens wrapped around as unsigned.
run "$TC_BIN/cache-fill" --input "$WORK/t.jsonl" --text t --tokenizer "$D/tokenizers/bert-uncased.json" \
  --max-length 1 --encoder "$D/text.pt" --out "$WORK/t.h5" -q
expect_rc 64
expect_err "cache-fill: error: --max-length: 1 cannot hold the 2 special tokens the tokenizer adds to every text"
for bad in -5 '"long"' 1; do
  py "
import json
t = json.load(open('$D/tokenizers/bert-uncased.json'))
t['truncation'] = {'max_length': $bad, 'strategy': 'LongestFirst', 'stride': 0, 'direction': 'Right'}
json.dump(t, open('$WORK/trunc.json', 'w'))"
  run "$TC_BIN/cache-fill" --input "$WORK/t.jsonl" --text t --tokenizer "$WORK/trunc.json" \
    --encoder "$D/text.pt" --out "$WORK/t.h5" -q
  expect_rc 65
  expect_err "cache-fill: error: $WORK/trunc.json: truncation.max_length $bad is not a length (a whole number of tokens, at least 2)"
done
expect_no_file "$WORK/t.h5"

# ---- 10. raw-mode --resume after the data file changed in place: refused, naming it ------------
cp "$D/pairs.h5" "$WORK/pairs.h5"
RAW=(--data "$WORK/pairs.h5" --query q --passage p --encoder "$D/tower.pt" --batch-size 32 --checkpoint-dir "$WORK/rck" -q)
run "$TC_BIN/gc-train" "${RAW[@]}" --steps 2
expect_rc 0
py "
import h5py
with h5py.File('$WORK/pairs.h5', 'r+') as f:
    f['q'][0] = f['q'][0] + 1"
run "$TC_BIN/gc-train" "${RAW[@]}" --steps 4 --resume
expect_rc 65
expect_err "gc-train: error: $WORK/rck/checkpoint.pt: checkpoint was written with other settings (changed: data_files)"

# ---- 11. a kept --data-cache float slab changed after it was complete: refused, like token slabs --
export TRAINCACHE_SHM_PREFIX="tc-test-fh-$$-"
trap 'rm -f /dev/shm/"$TRAINCACHE_SHM_PREFIX"*; rm -rf "$WORK"' EXIT
KEPT=(--data "$D/images.h5" --query images --labels labels --encoder "$D/cnn.pt" -b 50 -c 25 --epochs 1 -q
      --data-cache full --data-cache-keep fh)
run "$TC_BIN/gc-train" "${KEPT[@]}"
expect_rc 0
run "$TC_BIN/gc-train" "${KEPT[@]}"  # the sealed slab, unchanged, is used again
expect_rc 0
size=$(stat -c %s "/dev/shm/${TRAINCACHE_SHM_PREFIX}fh-0")
dd if=/dev/zero of="/dev/shm/${TRAINCACHE_SHM_PREFIX}fh-0" bs=1 seek=$((size / 2)) count=1000 conv=notrunc status=none
run "$TC_BIN/gc-train" "${KEPT[@]}"
expect_rc 65
expect_err "gc-train: error: fh-0: slab changed since it was sealed (remove it: shm-cache rm fh-0)"
"$TC_BIN/shm-cache" rm -q fh-0

# ---- 6. names that are not UTF-8 (a Latin-1 class folder, file name and CSV label) ---------------
# cache-fill exited 70 while publishing, after the whole encode, and discarded the journal. The
# names are stored with U+FFFD for each ill-formed sequence (h5py decodes them); --strict-utf8
# refuses them before anything is encoded.
cafe=$(printf 'caf\xe9') naive=$(printf 'na\xefve')
mkdir -p "$WORK/latin/$cafe" "$WORK/latin/plain"
cp "$WORK/ok/c0/00.png" "$WORK/latin/$cafe/$naive.png"
cp "$WORK/ok/c0/02.png" "$WORK/latin/plain/a.png"
printf 'file,label,key\nlatin/plain/a.png,%s,%s\nlatin/%s/%s.png,b,k2\n' "$cafe" "$naive" "$cafe" "$naive" > "$WORK/latin.csv"
run "$TC_BIN/cache-fill" --input "$WORK/latin" --encoder cnn="$D/cnn.pt" "${FILL[@]}" --out "$WORK/latin.h5"
expect_rc 0
run "$TC_BIN/cache-fill" --input "$WORK/latin.csv" --features file --labels label --key key --encoder cnn="$D/cnn.pt" \
  "${FILL[@]}" --out "$WORK/latin_csv.h5"
expect_rc 0
py "
import h5py, json
for name in ('latin', 'latin_csv'):
    f = h5py.File('$WORK/' + name + '.h5')
    print(ascii([k.decode() for k in f['keys'][:]]), f['labels'][:].tolist(), f['embeddings/cnn'].shape[0])
"
expect_out "['caf\ufffd/na\ufffdve.png', 'plain/a.png'] [0, 1] 2
['na\ufffdve', 'k2'] [1, 0] 2"
run "$TC_BIN/cache-inspect" --json "$WORK/latin.h5"
expect_out_has "\"names\":[\"caf$(printf '\xef\xbf\xbd')\",\"plain\"]"
run "$TC_BIN/cache-fill" --input "$WORK/latin" --encoder cnn="$D/cnn.pt" "${FILL[@]}" --out "$WORK/strict.h5" --strict-utf8
expect_rc 65
expect_err "cache-fill: error: $WORK/latin/$cafe: invalid UTF-8 at byte 4 (without --strict-utf8 it is replaced with U+FFFD)"
expect_no_file "$WORK/strict.h5"

# ---- 14. manifests: a UTF-8 byte order mark, a NUL byte, keys that look like integers -----------
printf '\xef\xbb\xbffile,key\nok/c0/00.png,007\nok/c1/01.png,12\n' > "$WORK/bom.csv"
run "$TC_BIN/cache-fill" --input "$WORK/bom.csv" --features file --key key --encoder cnn="$D/cnn.pt" "${FILL[@]}" \
  --out "$WORK/bom.h5"
expect_rc 0
printf '{"file": "ok/c0/00.png", "key": "5"}\n{"file": "ok/c1/01.png", "key": "6"}\n' > "$WORK/k.jsonl"
run "$TC_BIN/cache-fill" --input "$WORK/k.jsonl" --features file --key key --encoder cnn="$D/cnn.pt" "${FILL[@]}" \
  --out "$WORK/k.h5"
expect_rc 0
py "
import h5py
print([h5py.File('$WORK/' + n + '.h5')['keys'][:].tolist() for n in ('bom', 'k')])"
expect_out "[[b'007', b'12'], [b'5', b'6']]"
printf 'file,key\nok/c0/00.png,a\0b\n' > "$WORK/nul.csv"
run "$TC_BIN/cache-fill" --input "$WORK/nul.csv" --features file --key key --encoder cnn="$D/cnn.pt" "${FILL[@]}" \
  --out "$WORK/nul.h5"
expect_rc 65
expect_err "cache-fill: error: $WORK/nul.csv:2: field 'key' holds a NUL byte"

# A flipped byte in an .npz member, stored or compressed, fails the CRC-32 the archive records:
# 65 naming the member (it was read as data). The byte is the last of the member's data.
py "
import h5py, numpy as np, zipfile
images = h5py.File('$D/images.h5')['images'][:40]
for name, save in (('stored', np.savez), ('deflated', np.savez_compressed)):
    save('$WORK/' + name + '.npz', images=images)
    raw = bytearray(open('$WORK/' + name + '.npz', 'rb').read())
    info = zipfile.ZipFile('$WORK/' + name + '.npz').getinfo('images.npy')
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.compress_size - 1
    raw[at] ^= 0x01
    open('$WORK/' + name + '_bad.npz', 'wb').write(bytes(raw))
"
expect_rc 0
for z in stored deflated; do
  run "$TC_BIN/cache-fill" --input "$WORK/${z}.npz" --features images --encoder cnn="$D/cnn.pt" --threads 2 -q \
    --out "$WORK/$z.h5"
  expect_rc 0
  run "$TC_BIN/cache-fill" --input "$WORK/${z}_bad.npz" --features images --encoder cnn="$D/cnn.pt" --threads 2 -q \
    --out "$WORK/${z}_bad.h5"
  expect_rc 65
  expect_err_has "cache-fill: error: $WORK/${z}_bad.npz: images: "
  expect_no_file "$WORK/${z}_bad.h5"
done
# One label that is not an integer renumbers a column of integer labels: said, not silent.
printf 'file,label\nok/c0/00.png,7\nok/c1/01.png,3\nok/c0/02.png,cat\n' > "$WORK/mixed.csv"
run "$TC_BIN/cache-fill" --input "$WORK/mixed.csv" --features file --labels label --encoder cnn="$D/cnn.pt" \
  --channels gray --threads 2 --out "$WORK/mixed.h5"
expect_rc 0
expect_err_has "cache-fill: warning: $WORK/mixed.csv:4: field 'label' holds 2 integer labels and 1 that are not ('cat' the first): every label is read as a name and numbered 0..K-1 in --label-order, so the integers do not keep their values"
py "
import h5py
print(h5py.File('$WORK/mixed.h5')['labels'][:].tolist())"
expect_out "[1, 0, 2]"

# ---- 15. a mistyped --input is 66; a manifest without --features lists its fields ---------------
run "$TC_BIN/cache-fill" --input "$WORK/smal/" --encoder cnn32="$D/cnn.pt" --out "$WORK/x.h5" -q
expect_rc 66
expect_err "cache-fill: error: $WORK/smal/: no such file or directory"
run "$TC_BIN/cache-fill" --input "$WORK/m.csv" --encoder cnn="$D/cnn.pt" --out "$WORK/x.h5" -q
expect_rc 64
expect_err "cache-fill: error: --features: no input dataset for encoder 'cnn': name the manifest's image field with --features FIELD or its text field with --text FIELD ($WORK/m.csv has file, label)"

# ---- 20. smart-bench on an image folder of mixed sizes: cache-fill's preprocessing ---------------
# Its message said to add --center-crop, which smart-bench did not have. The same options now
# reach the same decoding code; arrays take --resize H,W only.
py "
import os
from PIL import Image
for i, size in enumerate([(28, 28), (40, 30), (33, 50), (28, 28)] * 4):
    os.makedirs('$WORK/mixed/c%d' % (i % 2), exist_ok=True)
    Image.new('L', size, color=i * 9).save('$WORK/mixed/c%d/%02d.png' % (i % 2, i))
"
expect_rc 0
SBI=("$TC_BIN/smart-bench" --data "$WORK/mixed" --strategy none,full --epochs 1 -b 4 --model-ms 0)
run "${SBI[@]}"
expect_rc 65
expect_err_has "add --resize and/or --center-crop to bring them to one size"
run "${SBI[@]}" --resize 32 --center-crop 28 --channels gray --model "$D/cnn.pt" --json
expect_rc 0
expect_out_has '"strategy":"full","epoch":1,"samples":16,'
run "$TC_BIN/smart-bench" --data "$D/images.h5" --strategy none --epochs 1 -b 50 --center-crop 20
expect_rc 64
expect_err "smart-bench: error: --center-crop: applies to images (an image folder, a manifest or tar shards); uint8 arrays take --resize H,W only"

# ---- 7. --select-best when the evaluation rows hold no queries (one row per label) ----------------
# The untrained step-0 model was kept as --out and -inf saved as null broke --resume (70).
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$D/cnn.pt" --features images --labels labels \
  --out "$WORK/c.h5" || _fail "cache-fill"
PLAIN=(--cache "$WORK/c.h5" --embeddings cnn --head linear:8 --batch-size 32 --eval-rows 0:5 --seed 3)
SEL=("${PLAIN[@]}" --eval-every 1 --select-best map_at_r)
run "$TC_BIN/gc-train" "${SEL[@]}" --steps 3 --out "$WORK/sel.pt" --checkpoint-dir "$WORK/ck"
expect_rc 0
expect_err_has "gc-train: warning: --select-best: 'map_at_r' had no evaluation queries at any evaluation, so no model was selected; --out holds the last one"
run "$TC_BIN/gc-train" "${PLAIN[@]}" --steps 3 --out "$WORK/plain.pt"
expect_rc 0
py "
import torch
a = dict(torch.jit.load('$WORK/sel.pt').named_parameters())
b = dict(torch.jit.load('$WORK/plain.pt').named_parameters())
print(all(torch.equal(a[k], b[k]) for k in a))"
expect_out "True"
run "$TC_BIN/gc-train" "${SEL[@]}" --steps 5 --out "$WORK/sel.pt" --checkpoint-dir "$WORK/ck" --resume
expect_rc 0


# ---- 13. one class and a loss that needs two: 65, nothing to train (was loss 0, exit 0) -----------
py "
import h5py, numpy as np
src = h5py.File('$D/images.h5')
with h5py.File('$WORK/one.h5', 'w') as f:
    f['vec'] = src['vec'][:40]
    f['labels'] = np.full(40, 3, np.int64)"
expect_rc 0
ONE=(--data "$WORK/one.h5" --query vec --labels labels --encoder "$D/mlp.pt" --steps 2 -b 16 --threads 2 -q)
for loss in softmax triplet arcface cosface; do
  run "$TC_BIN/gc-train" "${ONE[@]}" --loss $loss --out "$WORK/one-$loss.pt"
  expect_rc 65
  expect_err "gc-train: error: --loss: $loss needs two classes or more, but every training row has label 3: nothing to train"
  expect_no_file "$WORK/one-$loss.pt"
done

# ---- 8. a smart data cache without --stream: the library streams by its own rule ----------------
# Only the tool forced streaming, and run_train dereferenced a null column for any other caller;
# the tool no longer forces it, so this run goes through the library's rule.
run "$TC_BIN/gc-train" --data "$D/images.h5" --query vec --labels labels --encoder "$D/mlp.pt" --steps 4 -b 16 \
  --threads 2 --data-cache smart:40,0.5 --json
expect_rc 0
expect_out_has '"status":"done"'
expect_out_has '"window":{"cache_num":40,"replace_num":20,'

# ---- 19. gc-train's before-training metrics when computed, evaluation progress, a sane rate ------
# The metrics before training were printed only at the end; an evaluation drew nothing; the first
# tick showed one step over microseconds (93,502 steps/s).
run "$TC_BIN/gc-train" "${PLAIN[@]/0:5/0:100}" --steps 12 --out "$WORK/p19.pt" --progress always
expect_rc 0
before=${err%%"gc-train: before training:"*} first_bar=${err%%"training ["*}
(( ${#before} < ${#first_bar} )) && _ok || _fail "the before-training metrics came after the training bar"
expect_err_has "evaluating [##############################] 100/100"
expect_err_has "training [##............................] 1/12  - steps/s"
after=${err%%"gc-train: after training:"*}
(( ${#before} < ${#after} )) && _ok || _fail "after training came before the metrics before it"
finish
