#!/usr/bin/env bash
# jpeg-bench: the device path of JPEG decoding (model::ImagePrep after the CPU's decoding, here on
# the CPU) gives the CPU path's bytes for every file, resize and crop; the comparison it reports
# is the one the GPU's numbers come from. With CUDA and nvJPEG (the GPU machine), nvJPEG's samples
# are within the bounds docs/inputs.md states; without them, the refusal (69) says why.
source "$(dirname "$0")/lib.sh"

# JPEGs as PIL writes them: sizes odd and even, 4:2:0, 4:4:4, progressive, grey, in two folders; a
# PNG beside them (not a JPEG: not listed).
"$TC_PYTHON" -c "
import numpy as np, os, sys
from PIL import Image
d = sys.argv[1]
rng = np.random.default_rng(3)
os.makedirs(d + '/a'); os.makedirs(d + '/b')
def img(h, w, c=3):
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * (3 + k) + y * (5 - k)) % 256 for k in range(c)], -1)
    return np.clip(base + rng.integers(0, 40, base.shape), 0, 255).astype(np.uint8)
Image.fromarray(img(256, 256)).save(d + '/a/0.jpg', quality=90)
Image.fromarray(img(301, 199)).save(d + '/a/1.jpg', quality=85, subsampling=0)
Image.fromarray(img(120, 333)).save(d + '/a/2.JPEG', quality=95, progressive=True)
Image.fromarray(img(97, 64, 1)[..., 0], 'L').save(d + '/b/3.jpg', quality=90)
Image.fromarray(img(50, 40)).save(d + '/b/4.jpeg', quality=75, subsampling=1)
Image.fromarray(img(8, 8)).save(d + '/b/5.png')
" "$WORK/imgs" || _fail "writing the JPEGs"

# check_json FIELD=VALUE...: the JSON document in $out has these values (agreement.* nested).
check_json() {
  echo "$out" > "$WORK/out.json"
  "$TC_PYTHON" - "$WORK/out.json" "$@" <<'PY' && _ok || _fail "jpeg-bench's JSON: $*"
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    got = d
    for part in k.split("."):
        got = got[part]
    if str(got) != v:
        bad.append(f"{k}: {got!r} (want {v})")
print("\n".join(bad), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

for sizes in "256 224" "100 300" "none none" "64,48 none" "none 200"; do
  set -- $sizes
  run "$TC_BIN/jpeg-bench" "$WORK/imgs" --device cpu --resize "$1" --center-crop "$2" --batch 2 --compare 2 --repeats 1
  expect_rc 0
  check_json files=5 decoder=cpu left_to_cpu=0 agreement.files=2 agreement.max_abs_diff=0 \
    agreement.identical_fraction=1.0 "resize=$1" "center_crop=$2"
done
run "$TC_BIN/jpeg-bench" "$WORK/imgs" --device cpu --files 3 --batch 8 --repeats 1
expect_rc 0
check_json files=3 agreement.files=3 agreement.max_abs_diff=0

# Images one pixel wide or high: their samples are the CPU path's too (they were read from freed
# memory once: a [3, h, w] view of the decoder's buffer is contiguous already when h or w is 1).
"$TC_PYTHON" -c "
import os, sys
from PIL import Image
os.makedirs(sys.argv[1])
for i, (w, h) in enumerate([(1, 1), (1, 9), (9, 1)]):
    Image.new('RGB', (w, h), (40 * i + 10, 220, 70)).save('%s/%d.jpg' % (sys.argv[1], i), quality=95)
" "$WORK/thin" || _fail "writing the thin JPEGs"
run "$TC_BIN/jpeg-bench" "$WORK/thin" --device cpu --resize 4,4 --center-crop none --batch 3 --compare 3 --repeats 2
expect_rc 0
check_json files=3 agreement.files=3 agreement.max_abs_diff=0

# On the GPU: nvJPEG against libjpeg-turbo (both decode the same DCT coefficients; their IDCTs and
# upsampling round differently). Elsewhere: refused with the reason.
run "$TC_BIN/jpeg-bench" "$WORK/imgs" --device cuda:0 --batch 3 --compare 5 --repeats 1
if [ "$rc" -eq 0 ]; then
  check_json files=5 left_to_cpu=0 agreement.files=3
  echo "$out" > "$WORK/gpu.json"
  "$TC_PYTHON" -c "
import json, sys
a = json.load(open(sys.argv[1]))['agreement']
print('jpeg-bench on the GPU:', a, file=sys.stderr)
sys.exit(0 if a['mean_abs_diff'] < 1.0 and a['max_abs_diff'] <= 16 else 1)" "$WORK/gpu.json" && _ok ||
    _fail "nvJPEG's samples beyond the stated bounds"
else
  expect_rc 69
  expect_one_line_err
  [[ "$err" == "jpeg-bench: error: "*"CUDA is not available"* || "$err" == "jpeg-bench: error: nvJPEG: "* ]] && _ok ||
    _fail "the refusal names CUDA or nvJPEG"
fi

# Bad input: no folder, a folder without JPEGs (66); a .jpg that is not one (65).
run "$TC_BIN/jpeg-bench" "$WORK/none" --device cpu
expect_rc 66
expect_err "jpeg-bench: error: $WORK/none: not a folder"
mkdir -p "$WORK/empty" && touch "$WORK/empty/x.png"
run "$TC_BIN/jpeg-bench" "$WORK/empty" --device cpu
expect_rc 66
expect_err "jpeg-bench: error: $WORK/empty: holds no .jpg or .jpeg files"
mkdir -p "$WORK/bad" && echo "not a JPEG" > "$WORK/bad/x.jpg"
run "$TC_BIN/jpeg-bench" "$WORK/bad" --device cpu
expect_rc 65
expect_one_line_err
run "$TC_BIN/jpeg-bench" "$WORK/imgs" --device cpu --batch 0
expect_rc 64
run "$TC_BIN/jpeg-bench" "$WORK/imgs" --device cpu --files 0
expect_rc 64
expect_err "jpeg-bench: error: --files: must be a positive integer, got '0' (see --help)"
# A file the CPU cannot decode is named (the message said "jpeg-bench: CMYK ...").
mkdir -p "$WORK/cmyk" && "$TC_PYTHON" -c "from PIL import Image; Image.new('CMYK', (8, 8)).save('$WORK/cmyk/c.jpg')"
run "$TC_BIN/jpeg-bench" "$WORK/cmyk" --device cpu
expect_rc 65
expect_err "jpeg-bench: error: $WORK/cmyk/c.jpg: CMYK JPEG images are not supported; convert them to RGB"

finish
