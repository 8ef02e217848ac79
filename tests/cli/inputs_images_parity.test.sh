#!/usr/bin/env bash
# Image folders, preprocessed as torchvision's transforms do on PIL images (python3-pil +
# python3-torchvision in the suite): 288 images of 9 kinds in three pipelines, on the host and with
# --convert device, EXIF orientation; the spec is stored, shown, verified and fingerprinted.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/images_lib.sh"

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

# three_fills SUFFIX FLAGS...: the rgb, pad and gray fills above again with FLAGS (and 3 reader
# threads for pad), into NAME-SUFFIX.h5; $out is then the rgb fill's --json.
three_fills() {
  local sfx=$1 rgb_json
  shift
  run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/rgb-$sfx.h5" "${FILL[@]}" --resize 40 --center-crop 36 \
    --normalize imagenet --json "$@"
  expect_rc 0
  rgb_json=$out
  run "$TC_BIN/cache-fill" --input "$WORK/oriented" --out "$WORK/pad-$sfx.h5" "${FILL[@]}" --resize 48 --center-crop 64 \
    --exif-transpose --workers 3 "$@"
  expect_rc 0
  run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/gray-$sfx.h5" "${FILL[@]}" --resize 30,45 --channels gray \
    --normalize 0.5:0.25 "$@"
  expect_rc 0
  out=$rgb_json
}
# same_as_host SUFFIX: the three NAME-SUFFIX.h5 hold the host fills' bytes under their fingerprints.
same_as_host() {
  py "
import h5py, numpy as np
for c in ['rgb', 'gray', 'pad']:
    a, b = h5py.File('$WORK/' + c + '.h5'), h5py.File('$WORK/' + c + '-$1.h5')
    x, y = a['embeddings/flat'][:], b['embeddings/flat'][:]
    print(c, x.shape == y.shape and x.tobytes() == y.tobytes(), a.attrs['fingerprint'] == b.attrs['fingerprint'])
"
  expect_out "rgb True True
gray True True
pad True True"
}

# --convert device: the 8-bit pixels travel and become floats on the encoders' device (here the
# CPU, through the same tensor operations a GPU runs); the flat encoder stores its input, so the
# floats must be the host's to the bit, under the same fingerprint.
three_fills dev --convert device
expect_out_has '"convert":"device"'
expect_out_has '"convert_thread":true' # the next batches converted on a thread of their own
same_as_host dev

# --decode device: the reader threads read JPEG files as they are (and decode the PNGs), the encode
# loop decodes, resizes and crops them on the encoders' device (here the CPU, with the CPU's
# decoder: nvJPEG on a CUDA device) and EXIF orientations are applied there: the same bytes, under
# the same fingerprint, as the reader threads' decoding.
three_fills dec --convert device --decode device
expect_out_has '"convert":"device","decode":"device"'
same_as_host dec
# The image code held to narrower vectors than the CPU's (TRAINCACHE_MAX_CPU_ISA: what CPUs without
# AVX-512, or without AVX2, run; the same on a CPU that lacks them): the same bytes.
for isa in avx2 sse2; do
  export TRAINCACHE_MAX_CPU_ISA=$isa
  three_fills "$isa"
  if [ "$(uname -m)" = x86_64 ]; then  # --json says what ran (SSE2 where the CPU lacks AVX2 too)
    want=$([ $isa = avx2 ] && grep -qw avx2 /proc/cpuinfo && echo "AVX2 (8 lanes)" || echo "SSE2 (4 lanes)")
    expect_out_has "\"image_simd\":\"$want"
  fi
  same_as_host "$isa"
done
unset TRAINCACHE_MAX_CPU_ISA
# Images of one pixel's width or height (their decoded [3, h, w] samples are contiguous already, so a
# view of the decoder's buffer would outlive it): the bytes of the host's decoding, twice.
py "
import os
from PIL import Image
for c, mode in (('a', 'RGB'), ('b', 'L')):
    os.makedirs('$WORK/thin/' + c)
    for i, (w, h) in enumerate([(1, 1), (1, 5), (7, 1), (2, 2)]):
        Image.new(mode, (w, h), (30 * i + 20, 200, 90) if mode == 'RGB' else 40 * i + 30).save(
            '$WORK/thin/%s/%d.jpg' % (c, i), quality=95)
"
thin_runs=0
for decode in host device device; do
  run "$TC_BIN/cache-fill" --input "$WORK/thin" --out "$WORK/thin-$decode.h5" "${FILL[@]}" --resize 6 --center-crop 6 \
    --convert device --decode $decode --force
  expect_rc 0
  cp "$WORK/thin-$decode.h5" "$WORK/thin-$decode-$((++thin_runs)).h5"
done
py "
import h5py, numpy as np
want = h5py.File('$WORK/thin-host-1.h5', 'r')['embeddings/flat'][()]
print([bool(np.array_equal(h5py.File('$WORK/thin-device-%d.h5' % k, 'r')['embeddings/flat'][()], want)) for k in (2, 3)])"
expect_out "[True, True]"
# Decoding on the device needs the conversion there; auto decodes there only on a CUDA device
# with nvJPEG (here: on the reader threads).
run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/none.h5" "${FILL[@]}" --resize 40 --center-crop 36 --convert host \
  --decode device
expect_rc 64
expect_err "cache-fill: error: --decode device: needs the images converted on the device too (--convert device; auto does so on CUDA only)"
expect_no_file "$WORK/none.h5"
run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/rgb-auto.h5" "${FILL[@]}" --resize 40 --center-crop 36 \
  --normalize imagenet --convert device --decode auto --json
expect_rc 0
expect_out_has '"convert":"device","decode":"host"'

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
# A cache whose JPEGs nvJPEG decoded (its fingerprint says so; written here into a CPU fill's, the
# only kind this machine makes) is verified by decoding them as --decode device does, on the CPU
# by libjpeg-turbo: the same bytes, EXIF orientations included. "nvjpeg-baseline": the baseline
# files by nvJPEG; "nvjpeg", caches filled before it: every whole JPEG (which files go where tells
# only on a GPU, where nvJPEG's bytes differ).
for decode in nvjpeg-baseline nvjpeg; do
  fingerprint_option "$WORK/pad-dec.h5" decode "\"$decode\""
  run "$TC_BIN/cache-inspect" --verify 12 "$WORK/pad-dec.h5"
  expect_rc 0
  expect_out_re "	flat	ok: 12 rows match"
done
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

# ---- --jpeg-draft: JPEGs decoded reduced (PIL's draft() asked for the resized size), then resized
# from there: PIL's bytes for that pipeline; PNGs as without it; its own fingerprint ----------------
run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/draft.h5" "${FILL[@]}" --resize 14 --center-crop 12 \
  --jpeg-draft
if [ "$rc" = 69 ]; then  # a build without libjpeg's headers (docs/inputs.md): refused, nothing made
  expect_err "cache-fill: error: --jpeg-draft: this build decodes JPEGs whole only (it was built without libjpeg's headers: libjpeg-dev)"
  expect_no_file "$WORK/draft.h5"
  finish
  exit
fi
expect_rc 0
run "$TC_PYTHON" "$REF" compare "$WORK/mixed" "$WORK/draft.h5" draft
expect_rc 0
expect_out_re "^draft rows 288 order True classes True within (1\.0+|0\.999[0-9]*) "
if [ "$pil_major" -le 9 ]; then  # Debian's Pillow decodes with the same libjpeg-turbo
  expect_out_re "max8 0\.00e\+00 maxall 0\.00000$"
else
  expect_out_re "max8 (0\.00e\+00|3\.92e-03) maxall 0\.00(000|392)$"
fi
run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/exact.h5" "${FILL[@]}" --resize 14 --center-crop 12
expect_rc 0
py "
import h5py, numpy as np
a, b = h5py.File('$WORK/draft.h5'), h5py.File('$WORK/exact.h5')
kinds = [k.decode().split('/')[0] for k in a['keys'][:]]
same = (a['embeddings/flat'][:] == b['embeddings/flat'][:]).all(axis=1)
print(sorted({k for k, s in zip(kinds, same) if not s}), all(s for k, s in zip(kinds, same) if k.startswith('png')))"
expect_out "['jpeg_gray', 'jpeg_rgb'] True"
run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/exact.h5" "${FILL[@]}" --resize 14 --center-crop 12 --jpeg-draft
expect_rc 73
expect_err_has "(changed: preprocess/jpeg_draft)"
run "$TC_BIN/cache-inspect" "$WORK/draft.h5"
expect_out_has "  preprocess   resize 14, center_crop 12,12, channels rgb, normalize none, exif_transpose no, jpeg_draft yes"
run "$TC_BIN/cache-inspect" --verify 8 "$WORK/draft.h5"
expect_rc 0
expect_out_re "	flat	ok: 8 rows match"
run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/none.h5" "${FILL[@]}" --center-crop 12 --jpeg-draft
expect_rc 64
expect_err "cache-fill: error: --jpeg-draft: decodes JPEGs reduced for a resize: give --resize too"
run "$TC_BIN/cache-fill" --input "$WORK/mixed" --out "$WORK/none.h5" "${FILL[@]}" --resize 14 --center-crop 12 \
  --jpeg-draft --convert device --decode device
expect_rc 64
expect_err "cache-fill: error: --decode device: decodes JPEGs whole: --jpeg-draft's reduced decode is the host's"
expect_no_file "$WORK/none.h5"
finish
