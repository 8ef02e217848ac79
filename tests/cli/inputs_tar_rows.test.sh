#!/usr/bin/env bash
# WebDataset tar shards (written by Python's tarfile from an image folder, tests/cli/tar_shards.py):
# the shard cache equals the folder cache row for row by key, to the bit; every way of naming the
# shards (brace range, list, glob, one .tar.gz) gives the same rows, text fields too; shm-cache,
# smart-bench and --export read them; shards over 2 processes merge to the single-process cache.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/tar_lib.sh"

# ---- the shards give the folder's rows: embeddings to the bit, labels, keys --------------------
run "$TC_BIN/cache-fill" --input "$WORK/folder" --out "$WORK/folder.h5" "${FILL[@]}"
expect_rc 0
run "$TC_BIN/cache-fill" --input "$SHARDS" --features png --labels cls --out "$WORK/tar.h5" "${FILL[@]}"
expect_rc 0
expect_no_out
# The fingerprint counts content, not how a path is spelled (issue 43, item 18): the same shards
# named by a glob, the same shards and folder copied elsewhere, are up to date; a changed byte is not.
cp -r "$WORK/shards" "$WORK/moved-shards"
cp -r "$WORK/folder" "$WORK/moved-folder"
for input in "$WORK/shards/*.tar" "$WORK/moved-shards/{0000..0003}.tar"; do
  run "$TC_BIN/cache-fill" --input "$input" --features png --labels cls --out "$WORK/tar.h5" "${FILL[@]:0:${#FILL[@]}-1}"
  expect_rc 0
  expect_err_re "tar\.h5: up to date"
done
run "$TC_BIN/cache-fill" --input "$WORK/moved-folder" --out "$WORK/folder.h5" "${FILL[@]:0:${#FILL[@]}-1}"
expect_rc 0
expect_err_re "folder\.h5: up to date"
py "
import io, tarfile
src = tarfile.open('$WORK/shards/0002.tar')
with tarfile.open('$WORK/moved-shards/0002.tar', 'w') as out:  # one image member's last byte changed
    for i, m in enumerate(src.getmembers()):
        data = src.extractfile(m).read()
        if i == 0:
            data = data[:-1] + bytes([data[-1] ^ 1])
        out.addfile(m, io.BytesIO(data))
"
run "$TC_BIN/cache-fill" --input "$WORK/moved-shards/{0000..0003}.tar" --features png --labels cls --out "$WORK/tar.h5" \
  "${FILL[@]}"
expect_rc 73
expect_err_re "tar\.h5: exists with another fingerprint \(changed: input/content_xxh3\)"
rm -rf "$WORK/moved-shards" "$WORK/moved-folder"
run "$TC_BIN/cache-inspect" "$WORK/tar.h5"
expect_out_has "input        $SHARDS (tar) [png], images scaled to [0,1]"
expect_out_has "keys         string from '__key__'"
# A relative pattern is recorded made absolute: --verify reads the shards again from anywhere.
(cd "$WORK" && tool "$TC_BIN/cache-fill" --input 'shards/{0000..0003}.tar' --features png --labels cls --out rel.h5 "${FILL[@]}")
run "$TC_BIN/cache-inspect" "$WORK/rel.h5"
expect_out_has "input        $WORK/shards/{0000..0003}.tar (tar) [png]"
run "$TC_BIN/cache-inspect" --verify 5 "$WORK/rel.h5"
expect_rc 0
expect_out_re "	cnn	ok: 5 rows match"
# Every other way of naming them: a list in braces, a glob, the samples in one .tar.gz; labels from
# a field of each sample's json member.
run "$TC_BIN/cache-fill" --input "{$WORK/shards/0000.tar,$WORK/shards/0001.tar,$WORK/shards/0002.tar,$WORK/shards/0003.tar}" \
  --features png --labels cls --out "$WORK/list.h5" "${FILL[@]}"
expect_rc 0
run "$TC_BIN/cache-fill" --input "$WORK/shards/*.tar" --features png --labels json.label --out "$WORK/glob.h5" "${FILL[@]}"
expect_rc 0
run "$TC_BIN/cache-fill" --input "$WORK/all.tar.gz" --features png --labels cls --out "$WORK/gz.h5" "${FILL[@]}"
expect_rc 0
py "
import h5py
def rows(path, folder=False):
    f = h5py.File('$WORK/' + path)
    keys = [k.decode() for k in f['keys'][:]]
    if folder:
        keys = [k.split('/')[1][:-len('.png')] for k in keys]
    return keys, f['embeddings/cnn'][:], f['labels'][:].tolist()
fk, fe, fl = rows('folder.h5', True)
for name in ('tar.h5', 'list.h5', 'glob.h5', 'gz.h5'):
    k, e, l = rows(name)
    by_key = dict(zip(k, range(len(k))))
    same = all(e[by_key[key]].tobytes() == fe[i].tobytes() and l[by_key[key]] == fl[i] for i, key in enumerate(fk))
    print(name, len(k), sorted(k) == sorted(fk), k == fk, same)
"
expect_out "tar.h5 40 True True True
list.h5 40 True True True
glob.h5 40 True True True
gz.h5 40 True True True"

# Text fields: a sample's txt member is its text, as the manifest's field is (batches of a whole
# shard each, so both fills pad the same batches).
TEXT=(--text txt --tokenizer "$T/bert-uncased.json" --encoder "$D/text4k.pt" --batch-size 10 --length-window 10 -q)
run "$TC_BIN/cache-fill" --input "$SHARDS" "${TEXT[@]}" --out "$WORK/text-tar.h5"
expect_rc 0
run "$TC_BIN/cache-fill" --input "$WORK/pairs.jsonl" "${TEXT[@]}" --out "$WORK/text-manifest.h5"
expect_rc 0
py "
import h5py
a, b = (h5py.File('$WORK/text-' + n + '.h5')['embeddings/text4k'][:] for n in ('tar', 'manifest'))
print(a.shape, a.tobytes() == b.tobytes())
"
expect_out "(40, 16) True"

# shm-cache fill takes shards as any other source: the same items as from the folder.
for src in tar:"$SHARDS" folder:"$WORK/folder"; do
  run "$TC_BIN/shm-cache" -q create "${src%%:*}" --len 40 --dims 1,28,28 --dtype float32 --slots 40
  run "$TC_BIN/shm-cache" -q fill "${src%%:*}" --from "${src#*:}" --dataset "$([ "${src%%:*}" = tar ] && echo png || echo image)" \
    --channels gray --resize 28 --center-crop 28
  expect_rc 0
done
for i in 0 17 39; do
  "$TC_BIN/shm-cache" get tar "$i" > "$WORK/tar-$i.bin" && "$TC_BIN/shm-cache" get folder "$i" > "$WORK/folder-$i.bin"
  expect_same "$WORK/tar-$i.bin" "$WORK/folder-$i.bin"
  [ "$(stat -c %s "$WORK/tar-$i.bin")" -eq 3136 ] && _ok || _fail "item $i is not 28x28 float32"
done

# smart-bench decodes shards in its deterministic stage, as it does a folder.
run "$TC_BIN/smart-bench" --data "$SHARDS" --dataset png --labels cls --strategy none,full --epochs 2 -b 10 \
  --model-ms 0 --channels gray --resize 28 --center-crop 28 --json
expect_rc 0
echo "$out" > "$WORK/sb.json"
py "
import json
d = json.load(open('$WORK/sb.json'))
print([(r['strategy'], r['epoch'], r['samples'], r['hit_rate']) for r in d['records']])
"
expect_out "[('none', 1, 40, 0.0), ('none', 2, 40, 0.0), ('full', 1, 40, 0.0), ('full', 2, 40, 1.0)]"

# ---- the rows for vector search: .npy files and JSON Lines keyed as the shards were ------------
run "$TC_BIN/cache-inspect" "$WORK/tar.h5" --export npy "$WORK/vectors" --rows-per-file 25 -q
expect_rc 0
py "
import glob, json, numpy as np, h5py
e = np.concatenate([np.load(p) for p in sorted(glob.glob('$WORK/vectors/cnn/*.npy'))])
meta = [json.loads(l) for p in sorted(glob.glob('$WORK/vectors/metadata/*.jsonl')) for l in open(p)]
print(e.tobytes() == h5py.File('$WORK/tar.h5')['embeddings/cnn'][:].tobytes(), meta[11], meta[39])
"
expect_out "True {'row': 11, 'key': 'cat11', 'label': 0} {'row': 39, 'key': 'dog19', 'label': 1}"

# ---- two processes, each taking whole shards, merge to the single-process cache -----------------
for i in 0 1; do
  run "$TC_BIN/cache-fill" --input "$SHARDS" --features png --labels cls --shard "$i/2" --out "$WORK/sh.h5" "${FILL[@]}"
  expect_rc 0
done
run "$TC_BIN/cache-inspect" "$WORK/sh.h5.shard-1-of-2"
expect_out_has "rows         20 (input rows 20..40)"
run "$TC_BIN/cache-fill" merge --out "$WORK/merged.h5" "$WORK/sh.h5.shard-0-of-2" "$WORK/sh.h5.shard-1-of-2" --copy
expect_rc 0
py "
import h5py
a, b = h5py.File('$WORK/merged.h5'), h5py.File('$WORK/tar.h5')
print(a['embeddings/cnn'][:].tobytes() == b['embeddings/cnn'][:].tobytes(),
      all(a[d][:].tolist() == b[d][:].tolist() for d in ('labels', 'keys')))
"
expect_out "True True"
run "$TC_BIN/cache-fill" --input "$SHARDS" --features png --shard 0/5 --out "$WORK/five.h5" "${FILL[@]}"
expect_rc 64
expect_err "cache-fill: error: --shard: 5 shards for only 4 input files (each shard takes whole files)"

# ---- a sample without a field the options name ---------------------------------------------------
run "$TC_BIN/cache-fill" --input "$WORK/bad/nocls.tar" --features png --labels cls --out "$WORK/nocls.h5" "${FILL[@]}"
expect_rc 65
expect_err "cache-fill: error: $WORK/bad/nocls.tar: b: no field 'cls'"
expect_no_file "$WORK/nocls.h5"
run "$TC_BIN/cache-fill" --input "$WORK/bad/nocls.tar" --features png --labels cls --out "$WORK/nocls.h5" "${FILL[@]:0:12}" \
  --on-error skip  # without -q: the warning
expect_rc 0
expect_err_has "cache-fill: warning: 1 sample without every field named left out (--on-error skip); the first: $WORK/bad/nocls.tar: b has no 'cls'
cache-fill: $WORK/nocls.h5: 2 rows (2 encoded) in"
py "import h5py; f = h5py.File('$WORK/nocls.h5'); print([k.decode() for k in f['keys'][:]], f['labels'][:].tolist())"
expect_out "['a', 'c'] [0, 1]"
# Such a fill in two shards, merged: --verify leaves the same samples out, as the job's fingerprint
# says (--on-error skip; the merged cache's own fingerprint names only the job and its shards: its
# rows once went one sample off from the first left out, a false MISMATCH).
py "
import io, tarfile
import numpy as np
from PIL import Image
rng = np.random.default_rng(3)
for i in range(2):  # three samples of images of their own, the second without a cls
    with tarfile.open(f'$WORK/nocls{i}.tar', 'w') as out:
        for k in 'abc':
            b = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8)).save(b, 'PNG')
            for ext, data in [('png', b.getvalue())] + ([('cls', b'1')] if k != 'b' else []):
                m = tarfile.TarInfo(f'{i}{k}.{ext}')
                m.size = len(data)
                out.addfile(m, io.BytesIO(data))
"
for i in 0 1; do
  run "$TC_BIN/cache-fill" --input "$WORK/nocls{0..1}.tar" --features png --labels cls --on-error skip --shard "$i/2" \
    --out "$WORK/nm.h5" "${FILL[@]}"
  expect_rc 0
done
run "$TC_BIN/cache-fill" merge --out "$WORK/nm.h5" "$WORK/nm.h5.shard-0-of-2" "$WORK/nm.h5.shard-1-of-2" -q
expect_rc 0
run "$TC_BIN/cache-inspect" --verify 4 "$WORK/nm.h5"
expect_rc 0
expect_out_re "^$WORK/nm.h5	cnn	ok: 4 rows match"
# --check holds a merged cache to what its job's fingerprint promises, as it holds a fill's.
run "$TC_BIN/cache-inspect" --check "$WORK/nm.h5"
expect_rc 0
cp "$WORK/nm.h5" "$WORK/nm-nolabels.h5"
py "
import h5py
with h5py.File('$WORK/nm-nolabels.h5', 'a') as f:
    del f['labels']
"
run "$TC_BIN/cache-inspect" --check "$WORK/nm-nolabels.h5"
expect_rc 1
expect_out_has "/labels is missing: the fingerprint has labels"


finish
