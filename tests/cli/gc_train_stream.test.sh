#!/usr/bin/env bash
# gc-train --stream: each batch's rows read from the data (HDF5, image manifests) or the cache,
# converted per batch: the same trained bytes as loading everything, and memory that does not
# hold the data.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA

# same_run NAME ARGS...: the run with and without --stream writes byte-identical --out files.
same_run() {
  local name=$1
  shift
  run "$TC_BIN/gc-train" -q "$@" --out "$WORK/$name.pt"
  expect_rc 0
  run "$TC_BIN/gc-train" -q "$@" --stream --out "$WORK/$name-stream.pt"
  expect_rc 0
  expect_same "$WORK/$name.pt" "$WORK/$name-stream.pt"
}

# Raw HDF5 pairs with two hard negatives per row, shuffled batches, evaluation of held-out rows.
same_run pairs --data "$D/pairs.h5" --query q --passage p --negatives negs --encoder "$D/tower.pt" -b 16 -c 5 \
  --steps 6 --eval-rows 200: --seed 3
# A manifest of PNG files (decoded and preprocessed per batch), one hard negative per row, and
# raw grouped mode over its labels.
"$TC_PYTHON" - "$WORK/png" <<'PY' || _fail "writing PNG files"
import os, sys
import numpy as np
from PIL import Image
out = sys.argv[1]
os.makedirs(out)
rng = np.random.default_rng(7)
with open(os.path.join(out, "m.csv"), "w") as f:
    f.write("a,b,neg,label\n")
    for i in range(60):
        for k in "abn":
            Image.fromarray(rng.integers(0, 256, (30, 30), dtype=np.uint8)).save(os.path.join(out, f"{k}{i}.png"))
        f.write(f"a{i}.png,b{i}.png,n{i}.png,{i % 3}\n")
PY
IMG=(--data "$WORK/png/m.csv" --channels gray --center-crop 28 --encoder "$D/cnn.pt" -b 20 -c 8 --steps 3)
same_run manifest "${IMG[@]}" --query a --passage b --negatives neg
same_run grouped "${IMG[@]}" --query a --labels label --loss softmax --eval-rows 40:
# Cached embeddings, aligned and grouped (a classifier and its evaluation).
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$D/cnn.pt" --encoder other="$D/cnn_other.pt" \
  --features images --labels labels --out "$WORK/c.h5" || _fail "cache-fill"
same_run aligned --cache "$WORK/c.h5" --query-embeddings cnn --passage-embeddings other --head mlp:32,16 -b 50 \
  --steps 6 --eval-split 0.2
same_run cached --cache "$WORK/c.h5" --embeddings cnn --head mlp:32,16 --loss arcface -b 50 --steps 6 \
  --eval-split 0.2 --stratify

# Memory: 100,000 images of 28x28 (78 MB = 75 MiB as uint8, 314 MB as float32) cost the in-memory
# run the data as stored (uint8, converted a batch at a time), not converted; the streamed run holds a
# batch at a time.
"$TC_PYTHON" -c "
import h5py, numpy as np
rng = np.random.default_rng(1)
with h5py.File('$WORK/big.h5', 'w') as f:
    f.create_dataset('images', data=rng.integers(0, 256, (100000, 1, 28, 28), dtype=np.uint8), chunks=(512, 1, 28, 28))
    f['labels'] = np.arange(100000) % 10
" || _fail "writing big.h5"
# The peak is the one --json reports (VmHWM); this small Python parent's wait4 figure must agree
# where the peak comes during the run. After the report, pip's CUDA LibTorch touches ~100 MiB more
# while the process ends (seen on the CPU and on an H200): wait4 may then exceed the report, never
# the other way round.
py "
import json, os, subprocess
def peak(extra):
    cmd = ['$TC_BIN/gc-train', '-q', '--json', '--data', '$WORK/big.h5', '--query', 'images', '--labels', 'labels',
           '--encoder', '$D/cnn.pt', '-b', '64', '-c', '32', '--steps', '2', '--threads', '1'] + extra
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, p.stderr.read()
    reported = json.loads(out)['peak_rss_bytes'] / 2**20
    waited = usage.ru_maxrss / 1024
    assert reported < waited * 1.05 and (waited < reported * 1.05 or waited - reported < 150), (reported, waited)
    return reported
whole, streamed = peak([]), peak(['--stream'])
print('ok' if 55 < whole - streamed < 150 else 'whole %.0f MiB, streamed %.0f MiB' % (whole, streamed))
"
expect_out "ok"

# Inputs that would not fit in memory are streamed without being asked: 1,000,000 rows of
# 4x256x256 (unwritten chunks: a small file) would take 244 GiB loaded (uint8 stays uint8).
"$TC_PYTHON" -c "
import h5py, numpy as np, sys, torch
with h5py.File(sys.argv[1], 'w') as f:
    f.create_dataset('images', (1000000, 4, 256, 256), np.uint8, chunks=(16, 4, 256, 256))
    f['labels'] = np.arange(1000000) % 10
class Mean(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1, 4))
    def forward(self, x):
        return x.flatten(1).mean(1, keepdim=True) @ self.w + torch.arange(4.0)
torch.jit.trace(Mean(), torch.zeros(2, 1, 8, 8)).save(sys.argv[2])" "$WORK/huge.h5" "$WORK/mean.pt" || _fail "writing huge.h5"
run "$TC_BIN/gc-train" --data "$WORK/huge.h5" --query images --labels labels --encoder "$WORK/mean.pt" -b 8 \
  --steps 1 --json
expect_rc 0
expect_err_re "gc-train: loading the inputs whole needs 244\.14 GiB of memory but [0-9.]+ [GMT]iB is available: streaming them \(--stream\)"
expect_out_has '"steps":1,'
finish
