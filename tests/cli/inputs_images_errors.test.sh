#!/usr/bin/env bash
# Image folders and manifests that cannot be read: one line naming the file (and manifest line),
# with its exit code, or with --on-error skip a zero row listed in /skipped; a fill from an image
# folder killed part way resumes to identical bytes.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/images_lib.sh"

# png/: the fixture images as PNG files by class (300); big/: six more copies of each (1800), for
# the resume test; m.csv: a manifest whose fields the misspelt-field error lists.
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
printf 'file,class,id\nmixed/png_rgb/000.png,png_rgb,a\n' > "$WORK/m.csv"

# ---- bad input: one line naming the file (and manifest line), with its exit code ----------------
mkdir -p "$WORK/bad/a" "$WORK/bad/b" "$WORK/empty" "$WORK/hollow/a" "$WORK/hollow/b"
for f in $(ls "$WORK/png/c0" | head -4); do cp "$WORK/png/c0/$f" "$WORK/bad/a/"; cp "$WORK/png/c0/$f" "$WORK/hollow/a/"; done
bad_fill() { run "$TC_BIN/cache-fill" --out "$WORK/bad.h5" "${FILL[@]}" "$@"; expect_one_line_err; expect_no_file "$WORK/bad.h5"; }
J=$WORK/oriented/all/o1_0.jpg
head -c $(($(stat -c %s "$J") / 2)) "$J" > "$WORK/bad/b/trunc.jpg"
bad_fill --input "$WORK/bad" --resize 8,8
expect_rc 65
expect_err_re "^cache-fill: error: $WORK/bad/b/trunc\.jpg: truncated JPEG \(.*\) \(--on-error skip stores a zero row for it and goes on\)$"
# Cut short below the crop: photos (375x500, noise, so that every row holds bytes) whose last 5% is
# gone lie under --center-crop's rows, which are all the reader decodes; it still entropy-decodes the
# rows below (a progressive file's scans are read whole first), so both are refused as PIL refuses
# them.
rm "$WORK/bad/b/trunc.jpg"
for kind in baseline progressive; do
  py "
import io
import numpy as np
from PIL import Image
b = io.BytesIO()
pixels = np.random.default_rng(0).integers(0, 256, (500, 375, 3), dtype=np.uint8)
Image.fromarray(pixels).save(b, 'JPEG', quality=90, progressive='$kind' == 'progressive')
open('$WORK/bad/b/cut.jpg', 'wb').write(b.getvalue()[:len(b.getvalue()) * 95 // 100])
try:
    Image.open('$WORK/bad/b/cut.jpg').load()
except OSError as e:
    print('PIL:', str(e).split(' (')[0])"
  expect_out "PIL: image file is truncated"
  bad_fill --input "$WORK/bad" --resize 256 --center-crop 224 --channels rgb
  expect_rc 65
  expect_err "cache-fill: error: $WORK/bad/b/cut.jpg: truncated JPEG (Premature end of JPEG file) (--on-error skip stores a zero row for it and goes on)"
  rm "$WORK/bad/b/cut.jpg"
done
head -c 300 "$J" > "$WORK/bad/b/trunc.jpg"  # cut inside the headers
bad_fill --input "$WORK/bad" --resize 8,8
expect_rc 65
expect_err "cache-fill: error: $WORK/bad/b/trunc.jpg: corrupt JPEG: Invalid JPEG file structure: missing SOS marker (--on-error skip stores a zero row for it and goes on)"
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
expect_err "cache-fill: error: $WORK/bad/b/x.bmp: unsupported image format (a BMP image); only JPEG and PNG are supported (--on-error skip stores a zero row for it and goes on)"
bad_fill --input "$WORK/empty"
expect_rc 65
expect_err "cache-fill: error: $WORK/empty: no class folders: an image folder holds one subfolder per class (ImageFolder layout)"
bad_fill --input "$WORK/hollow"
expect_rc 65
expect_err "cache-fill: error: $WORK/hollow/b: class folder holds no image files (.jpg, .jpeg, .png)"
printf 'file,class\nmixed/png_rgb/000.png,a\nmixed/png_rgb/nope.png,b\n' > "$WORK/miss.csv"
bad_fill --input "$WORK/miss.csv" --features file --labels class
expect_rc 66
expect_err "cache-fill: error: $WORK/miss.csv:3: mixed/png_rgb/nope.png: no such file or directory (--on-error skip stores a zero row for it and goes on)"
# Files the header probe rejects (no --resize H,W or --center-crop: every header is read at open to
# find the common size) are named with the same hint as files rejected while encoding: junk named
# .png, a FIFO, a dangling link; with --on-error skip each becomes a zero row.
mkdir -p "$WORK/probe/a"
for f in $(ls "$WORK/png/c0" | head -2); do cp "$WORK/png/c0/$f" "$WORK/probe/a/"; done
probe_case() {  # probe_case CODE FILE WHY
  bad_fill --input "$WORK/probe"
  expect_rc "$1"
  expect_err "cache-fill: error: $WORK/probe/a/$2: $3 (--on-error skip stores a zero row for it and goes on)"
  run "$TC_BIN/cache-fill" --out "$WORK/probe.h5" "${FILL[@]}" --input "$WORK/probe" --on-error skip --force
  expect_rc 0
  expect_eq "$("$TC_PYTHON" -c "import h5py; print(h5py.File('$WORK/probe.h5')['skipped/rows'][:].tolist())")" "[2]"
  rm "$WORK/probe/a/$2"
}
echo junk > "$WORK/probe/a/x.png"
probe_case 65 x.png "unsupported image format (not an image); only JPEG and PNG are supported"
mkfifo "$WORK/probe/a/x.png"
probe_case 66 x.png "not a regular file (a FIFO)"
ln -s "$WORK/nowhere.png" "$WORK/probe/a/x.png"
probe_case 66 x.png "no such file or directory"
bad_fill --input "$WORK/m.csv" --features file --labels clas --resize 8,8
expect_rc 64
expect_err "cache-fill: error: $WORK/m.csv: no field 'clas' (fields: file, class, id); did you mean 'class'?"
printf '{"file": "mixed/png_rgb/000.png"}\n{"file": \n' > "$WORK/broken.jsonl"
bad_fill --input "$WORK/broken.jsonl" --features file
expect_rc 65
expect_err "cache-fill: error: $WORK/broken.jsonl:2: invalid JSON at byte 10: unexpected end of input; expected '[', '{', or a literal"
# A lone surrogate escape (what Python's json.dumps writes for such a string) is named as such.
printf '{"file": "mixed/png_rgb/000.png"}\n{"file": "a\\ud800.png"}\n' > "$WORK/surrogate.jsonl"
bad_fill --input "$WORK/surrogate.jsonl" --features file
expect_rc 65
expect_err "cache-fill: error: $WORK/surrogate.jsonl:2: invalid JSON at byte 18: invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"
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
expect_err "cache-fill: error: $WORK/odd/a/cmyk.jpg: CMYK JPEG images are not supported; convert them to RGB (--on-error skip stores a zero row for it and goes on)"
bad_fill --input "$WORK/odd" --resize 8,8 --rows 0:1 --convert device --decode device  # refused in the encode loop
expect_rc 65
expect_err "cache-fill: error: $WORK/odd/a/cmyk.jpg: CMYK JPEG images are not supported; convert them to RGB (--on-error skip stores a zero row for it and goes on)"
bad_fill --input "$WORK/odd" --resize 8,8 --rows 1:2
expect_rc 65
expect_err "cache-fill: error: $WORK/odd/a/huge.png: image of 20000x20000 pixels is too large (over 178956970 pixels) (--on-error skip stores a zero row for it and goes on)"
# A model that refuses the images' shape: LibTorch's words, and which options make that shape.
run "$TC_BIN/cache-fill" --input "$WORK/png" --encoder cnn="$D/cnn.pt" --resize 28 --center-crop 28 --threads 2 \
  --out "$WORK/bad.h5"
expect_rc 65
expect_one_line_err
expect_err_re "^cache-fill: error: encoder 'cnn': rejected the input \(\[[0-9]+, 3, 28, 28\] float32\): .* \(the images' shape comes from --channels, --resize and --center-crop: give the ones the model was trained with\)$"
expect_no_file "$WORK/bad.h5"
# A center crop larger than the resize pads with zeros, as torchvision does, and says so.
run "$TC_BIN/cache-fill" --input "$WORK/png" --encoder "$WORK/flat.pt" --resize 24 --center-crop 32 --threads 2 \
  --out "$WORK/pad.h5"
expect_rc 0
expect_err_has "cache-fill: warning: --center-crop 32,32 is larger than --resize 24 makes an image's shorter side: such images are padded with zeros to it (as torchvision's CenterCrop pads)"
run "$TC_BIN/cache-fill" --input "$WORK/png" --encoder "$WORK/flat.pt" --resize 24 --center-crop 20 --threads 2 \
  --out "$WORK/nopad.h5"
expect_rc 0
[[ "$err" != *"padded with zeros"* ]] && _ok || _fail "a crop inside the resized image was said to pad"

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
run "$TC_BIN/cache-fill" --input "$WORK/bad" --out "$WORK/skip-dec.h5" --encoder "$WORK/flat.pt" --threads 2 --resize 8,8 \
  --channels gray --on-error skip --convert device --decode device -q
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
# --verify re-encodes the rows that were read, never a skipped one (which has nothing to re-encode:
# sampling one made every such cache fail with 65).
run "$TC_BIN/cache-inspect" --verify 7 "$WORK/skip.h5"
expect_rc 0
expect_out "$WORK/skip.h5	flat	ok: 5 rows match (max abs diff 0, tolerance 1e-05 + 0.0001*|x|)"
# --decode device (the JPEG cut in its headers and the BMP fail on the reader threads): the same
# rows, reasons and bytes.
py "
import h5py
a, b = h5py.File('$WORK/skip.h5'), h5py.File('$WORK/skip-dec.h5')
print(a['skipped/rows'][:].tolist() == b['skipped/rows'][:].tolist(), a['skipped/reasons'][:].tolist() == b['skipped/reasons'][:].tolist(),
      a['embeddings/flat'][:].tobytes() == b['embeddings/flat'][:].tobytes())
"
expect_out "True True True"
# Where --decode device decodes each file (--json's device_decode): a whole baseline JPEG on the
# device's decoder (libjpeg-turbo here, nvJPEG on a GPU); a PNG, a progressive JPEG (a GPU's
# hardware decoder takes baseline files only) and JPEGs without an end-of-image marker (cut in the
# scan or in the headers) on the reader threads, which refuse the cut ones exactly as --decode host
# does (nvJPEG would decode what a cut scan holds).
mkdir -p "$WORK/acct/a" "$WORK/acct/b"
cp "$J" "$WORK/acct/a/whole.jpg"
py "
from PIL import Image
Image.open('$J').save('$WORK/acct/b/prog.jpg', progressive=True, quality=90)
print(Image.open('$J').info.get('progressive', 0), Image.open('$WORK/acct/b/prog.jpg').info.get('progressive', 0))"
expect_out "0 1"
head -c $(($(stat -c %s "$J") / 2)) "$J" > "$WORK/acct/a/half.jpg"
head -c 300 "$J" > "$WORK/acct/b/head.jpg"
cp "$WORK/bad/b/ok.png" "$WORK/acct/b/ok.png"
for decode in host device; do
  run "$TC_BIN/cache-fill" --input "$WORK/acct" --out "$WORK/acct-$decode.h5" --encoder "$WORK/flat.pt" --threads 2 \
    --resize 8,8 --channels gray --on-error skip --convert device --decode $decode --json
  expect_rc 0
done
expect_out_has '"device_decode":{"reader_files":4,"device_files":1,"hardware_files":0,"host_files":0,'
py "
import h5py
a, b = h5py.File('$WORK/acct-host.h5'), h5py.File('$WORK/acct-device.h5')
print(b['skipped/rows'][:].tolist(), [r.decode().split(': ', 1)[1] for r in b['skipped/reasons'][:]],
      a['skipped/reasons'][:].tolist() == b['skipped/reasons'][:].tolist(),
      a['embeddings/flat'][:].tobytes() == b['embeddings/flat'][:].tobytes())
"
expect_out "[0, 2] ['truncated JPEG (Premature end of JPEG file)', 'corrupt JPEG: Invalid JPEG file structure: missing SOS marker'] True True"
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
# --verify opens the manifest as the fill did (its missing file's row was skipped, never sampled):
# it re-encodes the two rows that were read (it ended with 66 naming the missing file).
run "$TC_BIN/cache-inspect" --verify 3 "$WORK/miss.h5"
expect_rc 0
expect_out "$WORK/miss.h5	flat	ok: 2 rows match (max abs diff 0, tolerance 1e-05 + 0.0001*|x|)"
# And a tar shard as the fill read it: sample s2 without its cls member left out, s4's junk image
# skipped; the rows re-encoded are the fill's rows (a sample too many would shift them).
py "
import io, tarfile
with tarfile.open('$WORK/gap.tar', 'w') as t:
    for i in range(6):
        for ext, data in (('png', open('$WORK/mixed/png_rgb/00%d.png' % i, 'rb').read()), ('cls', b'%d' % (i % 2))):
            if (i, ext) != (2, 'cls'):
                m = tarfile.TarInfo('s%d.%s' % (i, ext))
                data = b'junk' if (i, ext) == (4, 'png') else data
                m.size = len(data)
                t.addfile(m, io.BytesIO(data))
print('ok')"
run "$TC_BIN/cache-fill" --input "$WORK/gap.tar" --features png --labels cls --out "$WORK/gap.h5" "${FILL[@]}" \
  --resize 8,8 --on-error skip -q
expect_rc 0
run "$TC_BIN/cache-inspect" --verify 5 "$WORK/gap.h5"
expect_rc 0
expect_out "$WORK/gap.h5	flat	ok: 4 rows match (max abs diff 0, tolerance 1e-05 + 0.0001*|x|)"
# A file whose bytes change while the run reads it (/proc/self/stat: the process's own counters,
# other bytes at each read): the input's digest reads each file once, and the row's read finds
# other bytes. Refused, nothing written; under --on-error skip its row is skipped with that
# reason, its row digest of the bytes the fingerprint holds (tests/unit/io/image_test.cpp).
printf 'file,class\n/proc/self/stat,a\n' > "$WORK/proc.csv"
changed="$WORK/proc.csv:2: /proc/self/stat: changed while this run read it (its bytes differ from those the input's digest was taken of); run again when the files stay as they are"
run "$TC_BIN/cache-fill" --input "$WORK/proc.csv" --features file --labels class --out "$WORK/proc.h5" "${FILL[@]}" \
  --resize 8,8
expect_rc 65
expect_err "cache-fill: error: $changed (--on-error skip stores a zero row for it and goes on)"
expect_no_file "$WORK/proc.h5"
run "$TC_BIN/cache-fill" --input "$WORK/proc.csv" --features file --labels class --out "$WORK/proc.h5" "${FILL[@]}" \
  --resize 8,8 --on-error skip
expect_rc 0
py "import h5py; f = h5py.File('$WORK/proc.h5'); print(f['skipped/rows'][:].tolist(), f['skipped/reasons'][0].decode())"
expect_out "[0] $changed"
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
