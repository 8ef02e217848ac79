#!/usr/bin/env bash
# Image folders and manifests: the tensors cache-fill feeds the encoder match torchvision's
# transforms on PIL images (python3-pil + python3-torchvision in the suite), the spec is stored
# and fingerprinted, manifests give what folders give, bad input is one line with its exit code,
# and a fill killed part way resumes to identical bytes.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
REF=$TC_SOURCE/tests/cli/images_reference.py

run "$TC_PYTHON" "$REF" make "$WORK"
expect_rc 0
FILL=(--encoder "$WORK/flat.pt" --threads 2 -q)

# ---- parity with torchvision: 288 images of 9 kinds (JPEG RGB/grey, PNG RGB/grey/RGBA/LA/
# palette/1-bit/16-bit), sizes 20..119, in three pipelines --------------------------------------
PARITY=()
parity() {  # $1: config, $2: folder, then cache-fill's preprocessing flags
  local config=$1 folder=$2
  shift 2
  run "$TC_BIN/cache-fill" --input "$WORK/$folder" --out "$WORK/$config.h5" "${FILL[@]}" "$@"
  expect_rc 0
  PARITY+=("$WORK/$folder" "$WORK/$config.h5" "$config")
}
parity rgb mixed --resize 40 --center-crop 36 --normalize imagenet
parity gray mixed --resize 30,45 --channels gray --normalize 0.5:0.25
parity pad oriented --resize 48 --center-crop 64 --exif-transpose  # EXIF 1..8 (JPEG and PNG); padded crop
run "$TC_PYTHON" "$REF" compare "${PARITY[@]}"  # one start of torchvision for the three
expect_rc 0
figures=$out
# Identical against Debian 12's Pillow 9.4; PyPI's Pillow 13 (make test-pip) differs by 1/255 in
# a few values (docs/inputs.md), within the issue's bar.
pil_major=$("$TC_PYTHON" -c 'import PIL; print(PIL.__version__.split(".")[0])')
for config in rgb gray pad; do
  out=$(grep "^$config " <<<"$figures")
  # The issue's bar (within 1/255 on >= 99.9% of values, mean difference <= 0.002) and ours:
  # identical values, since PIL's fixed-point resampling is reproduced.
  expect_out_re "^$config rows [0-9]+ order True classes True within (1\.0+|0\.999[0-9]*) mad 0\.00[0-2][0-9]* "
  if [ "$pil_major" -le 9 ]; then
    expect_out_re "max8 0\.00e\+00 maxall 0\.00000$"
  else
    expect_out_re "max8 (0\.00e\+00|3\.92e-03) maxall 0\.00(000|392)$"
  fi
done

# --convert device: the 8-bit pixels travel and become floats on the encoders' device (here the
# CPU, through the same tensor operations a GPU runs); the flat encoder stores its input, so the
# floats must be the host's to the bit, under the same fingerprint.
run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/rgb-dev.h5" "${FILL[@]}" --resize 40 --center-crop 36 \
  --normalize imagenet --convert device --json
expect_rc 0
expect_out_has '"convert":"device"'
run "$TC_BIN/cache-fill" --input "$WORK/oriented" --out "$WORK/pad-dev.h5" "${FILL[@]}" --resize 48 --center-crop 64 \
  --exif-transpose --convert device
expect_rc 0
run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/gray-dev.h5" "${FILL[@]}" --resize 30,45 --channels gray \
  --normalize 0.5:0.25 --convert device
expect_rc 0
py "
import h5py, numpy as np
for c in ['rgb', 'gray', 'pad']:
    a, b = h5py.File('$WORK/' + c + '.h5'), h5py.File('$WORK/' + c + '-dev.h5')
    x, y = a['embeddings/flat'][:], b['embeddings/flat'][:]
    print(c, x.shape == y.shape and x.tobytes() == y.tobytes(), a.attrs['fingerprint'] == b.attrs['fingerprint'])
"
expect_out "rgb True True
gray True True
pad True True"

# Without --exif-transpose the tag is ignored (PIL's default), so the rotated images differ.
run "$TC_BIN/cache-fill" --input "$WORK/oriented" --out "$WORK/noexif.h5" "${FILL[@]}" --resize 48 --center-crop 64
expect_rc 0
py "
import h5py, numpy as np
a, b = h5py.File('$WORK/pad.h5'), h5py.File('$WORK/noexif.h5')
k = [x.decode() for x in a['keys'][:]]
same = [bool((a['embeddings/flat'][i] == b['embeddings/flat'][i]).all()) for i in range(len(k))]
print(sorted({x.split('/')[1][:2].strip('_') for x, s in zip(k, same) if s}))
"
expect_out "['o1', 'p1']"

# ---- the spec is stored, shown and fingerprinted ------------------------------------------------
run "$TC_BIN/cache-inspect" "$WORK/rgb.h5"
expect_rc 0
expect_out_has "  input        $WORK/mixed (image-folder) [image]"
expect_out_has "  preprocess   resize 40, center_crop 36,36, channels rgb, normalize 0.485,0.456,0.406:0.229,0.224,0.225, exif_transpose no"
expect_out_has "labels       int64 from 'label', 9 classes: 0=jpeg_gray:32 1=jpeg_rgb:32 2=png16:32"
expect_out_has "keys         string from 'path'"
run "$TC_BIN/cache-inspect" "$WORK/rgb.h5" --json
expect_out_has '"input_kind":"image-folder"'
expect_out_has '"preprocess":{"resize":"40","center_crop":"36,36","channels":"rgb","normalize":"0.485,0.456,0.406:0.229,0.224,0.225","exif_transpose":"no"}'
expect_out_has '"names":["jpeg_gray","jpeg_rgb","png16","png_1bit","png_gray","png_la","png_pal","png_rgb","png_rgba"]'
# --verify decodes and preprocesses sampled rows again with the stored spec.
run "$TC_BIN/cache-inspect" --verify 6 "$WORK/rgb.h5"
expect_rc 0
expect_out_re "	flat	ok: 6 rows match"
run "$TC_BIN/cache-inspect" --verify 6 "$WORK/rgb.h5" --input "$D/images.h5"
expect_rc 64
expect_err "cache-inspect: error: $D/images.h5: is a hdf5 input but the cache was built from a image-folder one"
run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/rgb.h5" "${FILL[@]}" --resize 40 --center-crop 36 --normalize imagenet
expect_rc 0
run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/rgb.h5" "${FILL[@]}" --resize 44 --center-crop 36 --normalize imagenet
expect_rc 73
expect_err "cache-fill: error: $WORK/rgb.h5: exists with another fingerprint (changed: preprocess/resize); use --force to overwrite it"
run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/rgb.h5" "${FILL[@]}" --resize 40 --center-crop 36 --channels gray
expect_rc 73
expect_err_has "(changed: input/features/image/shape, preprocess/channels, preprocess/normalize)"

# Images of different sizes need a spec that makes them equal.
run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/x.h5" "${FILL[@]}"
expect_rc 65
expect_err_re "^cache-fill: error: $WORK/mixed: images differ in shape: $WORK/mixed/jpeg_gray/000\.jpeg gives \[3,[0-9]+,[0-9]+\] but $WORK/mixed/jpeg_gray/001\.jpeg gives \[3,[0-9]+,[0-9]+\]; add --resize and/or --center-crop to bring them to one size$"
expect_no_file "$WORK/x.h5"

# ---- a PNG folder of the fixture images gives the HDF5 input's embeddings ----------------------
py "
import h5py, os
from PIL import Image
f = h5py.File('$D/images.h5')
for i, (img, lab) in enumerate(zip(f['images'][:], f['labels'][:])):
    for copy in range(7):  # 300 in png/, 1800 in big/ for the resume test below
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

# ---- bad input: one line naming the file (and manifest line), with its exit code ----------------
mkdir -p "$WORK/bad/a" "$WORK/bad/b" "$WORK/empty" "$WORK/hollow/a" "$WORK/hollow/b"
for f in $(ls "$WORK/png/c0" | head -4); do cp "$WORK/png/c0/$f" "$WORK/bad/a/"; cp "$WORK/png/c0/$f" "$WORK/hollow/a/"; done
bad_fill() { run "$TC_BIN/cache-fill" --out "$WORK/bad.h5" "${FILL[@]}" "$@"; expect_one_line_err; expect_no_file "$WORK/bad.h5"; }
J=$WORK/oriented/all/o1_0.jpg
head -c $(($(stat -c %s "$J") / 2)) "$J" > "$WORK/bad/b/trunc.jpg"
bad_fill --input "$WORK/bad" --resize 8,8
expect_rc 65
expect_err_re "^cache-fill: error: $WORK/bad/b/trunc\.jpg: truncated JPEG \(.*\)$"
head -c 300 "$J" > "$WORK/bad/b/trunc.jpg"  # cut inside the headers
bad_fill --input "$WORK/bad" --resize 8,8
expect_rc 65
expect_err "cache-fill: error: $WORK/bad/b/trunc.jpg: corrupt JPEG: Invalid JPEG file structure: missing SOS marker"
rm "$WORK/bad/b/trunc.jpg"
$TC_PYTHON -c "
d = bytearray(open('$WORK/png/c0/000_00.png', 'rb').read()); d[40] ^= 0xFF
open('$WORK/bad/b/crc.png', 'wb').write(bytes(d))"
bad_fill --input "$WORK/bad" --resize 8,8
expect_rc 65
expect_err_re "^cache-fill: error: $WORK/bad/b/crc\.png: corrupt PNG \(.*\)$"
rm "$WORK/bad/b/crc.png"
printf 'BM\0\0\0\0' > "$WORK/bad/b/x.bmp"
bad_fill --input "$WORK/bad" --resize 8,8
expect_rc 65
expect_err "cache-fill: error: $WORK/bad/b/x.bmp: unsupported image format (a BMP image); only JPEG and PNG are supported"
bad_fill --input "$WORK/empty"
expect_rc 65
expect_err "cache-fill: error: $WORK/empty: no class folders: an image folder holds one subfolder per class (ImageFolder layout)"
bad_fill --input "$WORK/hollow"
expect_rc 65
expect_err "cache-fill: error: $WORK/hollow/b: class folder holds no image files (.jpg, .jpeg, .png)"
printf 'file,class\nmixed/png_rgb/000.png,a\nmixed/png_rgb/nope.png,b\n' > "$WORK/miss.csv"
bad_fill --input "$WORK/miss.csv" --features file --labels class
expect_rc 66
expect_err "cache-fill: error: $WORK/miss.csv:3: mixed/png_rgb/nope.png: no such file or directory"
bad_fill --input "$WORK/m.csv" --features file --labels clas --resize 8,8
expect_rc 64
expect_err "cache-fill: error: $WORK/m.csv: no field 'clas' (fields: file, class, id); did you mean 'class'?"
printf '{"file": "mixed/png_rgb/000.png"}\n{"file": \n' > "$WORK/broken.jsonl"
bad_fill --input "$WORK/broken.jsonl" --features file
expect_rc 65
expect_err "cache-fill: error: $WORK/broken.jsonl:2: invalid JSON"
printf 'file,class\nmixed/png_rgb/000.png,a,extra\n' > "$WORK/wide.csv"
bad_fill --input "$WORK/wide.csv" --features file
expect_rc 65
expect_err "cache-fill: error: $WORK/wide.csv:2: 3 fields, but the header has 2"
bad_fill --input "$WORK/mixed" --resize 8 --convert gpu
expect_rc 64
expect_err "cache-fill: error: --convert: gpu not in {auto,host,device} (see --help)"
bad_fill --input "$WORK/mixed" --resize 0
expect_rc 64
expect_err "cache-fill: error: --resize: expected S or H,W (integers 1..65535), got '0'"
bad_fill --input "$WORK/mixed" --resize 8 --channels gray --normalize imagenet
expect_rc 64
expect_err "cache-fill: error: --normalize: 3 values per statistic for 1 channel(s) (--channels gray); give 1"
printf '{"file": "mixed/png_rgb/000.png"}\n[1, 2]\n' > "$WORK/array.jsonl"
bad_fill --input "$WORK/array.jsonl" --features file
expect_rc 65
expect_err "cache-fill: error: $WORK/array.jsonl:2: not a JSON object"
printf '{"file": "mixed/png_rgb/000.png"}\n{"other": 1}\n' > "$WORK/gap.jsonl"
bad_fill --input "$WORK/gap.jsonl" --features file
expect_rc 65
expect_err "cache-fill: error: $WORK/gap.jsonl:2: field 'file' is missing or not a string or integer"
printf 'file,class\n"mixed/png_rgb/000.png,a\n' > "$WORK/open.csv"
bad_fill --input "$WORK/open.csv" --features file
expect_rc 65
expect_err "cache-fill: error: $WORK/open.csv:2: unterminated quoted field"
: > "$WORK/empty.csv"
bad_fill --input "$WORK/empty.csv" --features file
expect_rc 65
expect_err "cache-fill: error: $WORK/empty.csv: empty manifest: no header line"
mkdir -p "$WORK/odd/a"
$TC_PYTHON -c "
import struct, zlib
from PIL import Image
Image.new('CMYK', (8, 8)).save('$WORK/odd/a/cmyk.jpg')
def chunk(k, d): return struct.pack('>I', len(d)) + k + d + struct.pack('>I', zlib.crc32(k + d) & 0xFFFFFFFF)
open('$WORK/odd/a/huge.png', 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 20000, 20000, 8, 0, 0, 0, 0)))
"
bad_fill --input "$WORK/odd" --resize 8,8 --rows 0:1
expect_rc 65
expect_err "cache-fill: error: $WORK/odd/a/cmyk.jpg: CMYK JPEG images are not supported; convert them to RGB"
bad_fill --input "$WORK/odd" --resize 8,8 --rows 1:2
expect_rc 65
expect_err "cache-fill: error: $WORK/odd/a/huge.png: image of 20000x20000 pixels is too large (over 178956970 pixels)"
# With --on-error skip both become zero rows, each reason on stderr and in /skipped.
run "$TC_BIN/cache-fill" --input "$WORK/odd" --out "$WORK/odd.h5" --encoder "$WORK/flat.pt" --threads 2 --resize 8,8 --on-error skip
expect_rc 0
expect_err_has "cache-fill: warning: skipped input row 0: $WORK/odd/a/cmyk.jpg: CMYK JPEG images are not supported; convert them to RGB"
expect_err_has "cache-fill: warning: skipped input row 1: $WORK/odd/a/huge.png: image of 20000x20000 pixels is too large (over 178956970 pixels)"
run "$TC_BIN/cache-inspect" "$WORK/odd.h5"
expect_out_has "  skipped      2 rows whose image could not be read"

# --on-error skip: unreadable images become zero rows listed (with the reason) in /skipped; the
# rows stay aligned with labels and keys, cache-inspect reports them, gc-train leaves them out.
head -c 300 "$J" > "$WORK/bad/b/trunc.jpg"
printf 'BM\0\0\0\0' > "$WORK/bad/b/x.bmp"
cp "$WORK/png/c1/$(ls "$WORK/png/c1" | head -1)" "$WORK/bad/b/ok.png"
run "$TC_BIN/cache-fill" --input "$WORK/bad" --out "$WORK/skip-dev.h5" --encoder "$WORK/flat.pt" --threads 2 --resize 8,8 \
  --channels gray --on-error skip --convert device -q
expect_rc 0
run "$TC_BIN/cache-fill" --input "$WORK/bad" --out "$WORK/skip.h5" --encoder "$WORK/flat.pt" --threads 2 --resize 8,8 \
  --channels gray --on-error skip
expect_rc 0
expect_err_has "cache-fill: warning: skipped input row 5: $WORK/bad/b/trunc.jpg: corrupt JPEG: Invalid JPEG file structure: missing SOS marker"
expect_err_has "cache-fill: warning: skipped input row 6: $WORK/bad/b/x.bmp: unsupported image format (a BMP image); only JPEG and PNG are supported"
expect_err_has "skip.h5: 7 rows (7 encoded, 2 skipped (see /skipped)) in"
py "
import h5py
f = h5py.File('$WORK/skip.h5')
e = f['embeddings/flat'][:]
print(f['skipped/rows'][:].tolist(), [k.decode() for k in f['keys'][:]][4:], f['labels'][:].tolist(),
      bool((e[5:] == 0).all()), bool((e[4] != 0).any()), f['skipped/reasons'][1].decode(),
      e.tobytes() == h5py.File('$WORK/skip-dev.h5')['embeddings/flat'][:].tobytes())
"
expect_out "[5, 6] ['b/ok.png', 'b/trunc.jpg', 'b/x.bmp'] [0, 0, 0, 0, 1, 1, 1] True True $WORK/bad/b/x.bmp: unsupported image format (a BMP image); only JPEG and PNG are supported True"
run "$TC_BIN/cache-inspect" "$WORK/skip.h5" --json
expect_out_has '"skipped":2'
run "$TC_BIN/gc-train" --cache "$WORK/skip.h5" --embeddings flat --head linear:4 --batch-size 4 --steps 1 --threads 1
expect_rc 0
expect_err_has "gc-train: 2 rows skipped by cache-fill (unreadable images) are left out"
# Shards merged keep each shard's skipped rows, as rows of the merged cache (virtual and copied).
for i in 0 1; do
  run "$TC_BIN/cache-fill" --input "$WORK/bad" --out "$WORK/skm.h5" --encoder "$WORK/flat.pt" --threads 2 --resize 8,8 \
    --channels gray --on-error skip --batch-size 4 --shard $i/2 -q
  expect_rc 0
done
run "$TC_BIN/cache-fill" --input "$WORK/bad" --out "$WORK/skip4.h5" --encoder "$WORK/flat.pt" --threads 2 --resize 8,8 \
  --channels gray --on-error skip --batch-size 4 -q
expect_rc 0
run "$TC_BIN/cache-fill" merge --out "$WORK/skm-v.h5" "$WORK"/skm.h5.shard-* -q
expect_rc 0
run "$TC_BIN/cache-fill" merge --copy --out "$WORK/skm-c.h5" "$WORK"/skm.h5.shard-* -q
expect_rc 0
py "
import h5py
ref = h5py.File('$WORK/skip4.h5')
for name in ('skm-v.h5', 'skm-c.h5'):
    f = h5py.File('$WORK/' + name)
    print(name, f['skipped/rows'][:].tolist(), [r.decode() for r in f['skipped/reasons'][:]] == [r.decode() for r in ref['skipped/reasons'][:]],
          f['embeddings/flat'][:].tobytes() == ref['embeddings/flat'][:].tobytes())
"
expect_out "skm-v.h5 [5, 6] True True
skm-c.h5 [5, 6] True True"
run "$TC_BIN/gc-train" --cache "$WORK/skm-v.h5" --embeddings flat --head linear:4 --batch-size 4 --steps 1 --threads 1
expect_rc 0
expect_err_has "gc-train: 2 rows skipped by cache-fill (unreadable images) are left out"
# The same for a manifest line whose file is missing.
printf 'file,class\nmixed/png_rgb/000.png,a\nmixed/png_rgb/nope.png,b\nmixed/png_rgb/001.png,a\n' > "$WORK/miss.csv"
run "$TC_BIN/cache-fill" --input "$WORK/miss.csv" --features file --labels class --out "$WORK/miss.h5" "${FILL[@]}" \
  --resize 8,8 --on-error skip
expect_rc 0
py "import h5py; f = h5py.File('$WORK/miss.h5'); print(f['skipped/rows'][:].tolist(), f['skipped/reasons'][0].decode())"
expect_out "[1] $WORK/miss.csv:3: mixed/png_rgb/nope.png: no such file or directory"
rm "$WORK/bad/b/"*

# ---- SIGKILL during a fill from an image folder resumes to identical bytes ---------------------
ARGS=(--input "$WORK/big" --channels gray --encoder cnn="$D/cnn.pt" --threads 2 --batch-size 32 --commit-rows 256 --workers 1)
run "$TC_BIN/cache-fill" "${ARGS[@]}" --out "$WORK/ref.h5"
expect_rc 0
expect_err_re "ref\.h5: 1800 rows \(1800 encoded\)"
for target in 256 1024; do
  killed_fill "$WORK/k$target.h5" "$target" "${ARGS[@]}"
  expect_rc 0
  expect_err_re "resumed at [0-9]+"
  expect_same "$WORK/k$target.h5" "$WORK/ref.h5"
done
finish
