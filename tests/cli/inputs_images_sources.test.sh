#!/usr/bin/env bash
# Image folders and manifests through every reader: a PNG folder gives the HDF5 input's embeddings,
# gc-train trains on a manifest of image paths as on the same pixels in HDF5, shm-cache fill and
# smart-bench read folders, and CSV (quoted fields), TSV and JSON Lines manifests give the folder's
# cache.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/images_lib.sh"

# ---- a PNG folder of the fixture images gives the HDF5 input's embeddings ----------------------
py "
import h5py, os
from PIL import Image
f = h5py.File('$D/images.h5')
for i, (img, lab) in enumerate(zip(f['images'][:], f['labels'][:])):
    for copy in range(1):  # 300 in png/
        d = '$WORK/%s/c%d' % ('png' if copy == 0 else 'big', lab)
        os.makedirs(d, exist_ok=True)
        Image.fromarray(img[0]).save('%s/%03d_%02d.png' % (d, i, copy))
"
expect_rc 0
CNN=(--encoder cnn="$D/cnn.pt" --threads 2 -q)
run "$TC_BIN/cache-fill" --input "$D/images.h5" --features images --out "$WORK/h5.h5" "${CNN[@]}"
expect_rc 0
run "$TC_BIN/cache-fill" --input "$WORK/png" --channels gray --out "$WORK/png.h5" "${CNN[@]}"
expect_rc 0
py "
import h5py, numpy as np
a, b = h5py.File('$WORK/h5.h5'), h5py.File('$WORK/png.h5')
rows = [int(k.decode().split('/')[1][:3]) for k in b['keys'][:]]
print(len(set(rows)), np.abs(b['embeddings/cnn'][:] - a['embeddings/cnn'][:][rows]).max() < 1e-5,
      bool((b['labels'][:] == h5py.File('$D/images.h5')['labels'][:][rows]).all()))
"
expect_out "300 True True"

# ---- gc-train raw mode on a manifest of image paths trains as on the same pixels in HDF5 -------
py "
import h5py, numpy as np
f = h5py.File('$D/images.h5')
labels = f['labels'][:]
q = np.arange(len(labels))
p = np.array([next(j for j in list(range(i + 1, len(labels))) + list(range(i)) if labels[j] == labels[i]) for i in q])
n = (q + 7) % len(labels)
with open('$WORK/pairs.csv', 'w') as out:
    out.write('query,passage,negative\n')
    for a, b, c in zip(q, p, n):
        out.write('png/c%d/%03d_00.png,png/c%d/%03d_00.png,png/c%d/%03d_00.png\n' % (labels[a], a, labels[b], b, labels[c], c))
img = f['images'][:]
with h5py.File('$WORK/pairs.h5', 'w') as h:
    h['query'], h['passage'], h['negative'] = img[q], img[p], img[n][:, None]
"
expect_rc 0
GC=(--query query --passage passage --negatives negative --encoder "$D/cnn.pt" --batch-size 40 --chunk-size 16
    --optimizer sgd --lr 0.1 --no-shuffle --threads 2 --steps 3 -q)
run "$TC_BIN/gc-train" --data "$WORK/pairs.csv" --channels gray "${GC[@]}" --metrics "$WORK/csv.jsonl"
expect_rc 0
run "$TC_BIN/gc-train" --data "$WORK/pairs.h5" "${GC[@]}" --metrics "$WORK/h5.jsonl"
expect_rc 0
py "
import json
a = [json.loads(l)['loss'] for l in open('$WORK/h5.jsonl')]
b = [json.loads(l)['loss'] for l in open('$WORK/csv.jsonl')]
print(len(a), max(abs(x - y) for x, y in zip(a, b)) < 1e-5 * max(map(abs, a)))
"
expect_out "3 True"

# ---- shm-cache fill --from an image folder: the slab holds the preprocessed images -------------
export TRAINCACHE_SHM_PREFIX="tcimg-$$-"
trap 'rm -f /dev/shm/"$TRAINCACHE_SHM_PREFIX"*; rm -rf "$WORK"' EXIT
run "$TC_BIN/shm-cache" create px --len 300 --slots 300 --dims 1,28,28 --dtype float32 -q
expect_rc 0
run "$TC_BIN/shm-cache" fill px --from "$WORK/png" --channels gray --workers 2
expect_rc 0
expect_err_has "300 stored"
"$TC_BIN/shm-cache" get px 7 > "$WORK/item7.bin"
py "
import h5py, numpy as np
from PIL import Image
import os
files = sorted(os.path.join(r, f) for r, _, fs in os.walk('$WORK/png') for f in fs)
want = np.asarray(Image.open(sorted(files)[7]).convert('L'), np.float32) / 255
print(bool((np.fromfile('$WORK/item7.bin', np.float32).reshape(28, 28) == want).all()))
"
expect_out "True"
run "$TC_BIN/shm-cache" fill px --from "$WORK/png"
expect_rc 65
expect_err "shm-cache: error: $WORK/png: 'image' rows are [3,28,28]; the slab holds [1,28,28]"
run "$TC_BIN/shm-cache" fill px --from "$D/images.h5"
expect_rc 64
expect_err "shm-cache: error: --dataset: name the dataset of the HDF5 file to read"
$TC_PYTHON -c "import numpy as np; np.save('$WORK/u8.npy', np.zeros((300, 1, 28, 28), np.uint8))"
run "$TC_BIN/shm-cache" fill px --from "$WORK/u8.npy"
expect_rc 65
expect_err "shm-cache: error: $WORK/u8.npy: 'u8' holds uint8; the slab holds float32"

# ---- smart-bench reads the folder through the same source layer (decoding in the pipeline) ----
run "$TC_BIN/smart-bench" --data "$WORK/png" --strategy none,full --epochs 2 -b 50 --model-ms 0 --json
expect_rc 0
echo "$out" > "$WORK/sb.json"
py "
import json
d = json.load(open('$WORK/sb.json'))
by = {(r['strategy'], r['epoch']): r for r in d['records']}
print(by[('none', 2)]['samples'], by[('full', 2)]['hit_rate'])
"
expect_out "300 1.0"

# ---- manifests: CSV (quoted fields), TSV and JSON Lines give the folder's cache -----------------
run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/rgb.h5" "${FILL[@]}" --resize 40 --center-crop 36 --normalize imagenet
expect_rc 0
py "
import json, os, random
rows = []
for c in sorted(os.listdir('$WORK/mixed')):
    for f in sorted(os.listdir('$WORK/mixed/' + c)):
        rows.append(('mixed/%s/%s' % (c, f), c, 'id,%s/%s' % (c, f)))
with open('$WORK/m.csv', 'w') as out:
    out.write('file,class,id\r\n')
    for p, c, k in rows: out.write('%s,\"%s\",\"%s\"\r\n' % (p, c, k.replace('\"', '\"\"')))
with open('$WORK/m.tsv', 'w') as out:
    out.write('file\tclass\tid\n' + ''.join('%s\t%s\t%s\n' % r for r in rows))
random.Random(3).shuffle(rows)
with open('$WORK/m.jsonl', 'w') as out:
    for p, c, k in rows: out.write(json.dumps({'file': p, 'class': c, 'id': k}) + '\n')
"
expect_rc 0
SPEC=(--resize 40 --center-crop 36 --normalize imagenet)
for m in csv tsv; do
  run "$TC_BIN/cache-fill" --input "$WORK/m.$m" --features file --labels class --key id --out "$WORK/m_$m.h5" "${FILL[@]}" "${SPEC[@]}"
  expect_rc 0
  py "
import h5py, json
a, b = h5py.File('$WORK/rgb.h5'), h5py.File('$WORK/m_$m.h5')
print(bool((a['embeddings/flat'][:] == b['embeddings/flat'][:]).all()), bool((a['labels'][:] == b['labels'][:]).all()),
      json.loads(b['labels'].attrs['label_names']) == json.loads(a['labels'].attrs['label_names']), b['keys'][0].decode())
"
  expect_out "True True True id,jpeg_gray/000.jpeg"
done
# JSON Lines, shuffled: labels numbered in first-seen order when asked.
run "$TC_BIN/cache-fill" --input "$WORK/m.jsonl" --features file --labels class --label-order first-seen --out "$WORK/m_jsonl.h5" "${FILL[@]}" "${SPEC[@]}"
expect_rc 0
py "
import h5py, json
b = h5py.File('$WORK/m_jsonl.h5')
names = json.loads(b['labels'].attrs['label_names'])
first = [json.loads(l)['class'] for l in open('$WORK/m.jsonl')]
seen = list(dict.fromkeys(first))
print(names == seen, [names[i] for i in b['labels'][:]] == first)
"
expect_out "True True"
run "$TC_BIN/cache-inspect" "$WORK/m_jsonl.h5"
expect_out_has "  input        $WORK/m.jsonl (manifest) [file]"

finish
