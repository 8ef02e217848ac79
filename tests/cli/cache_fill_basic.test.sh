#!/usr/bin/env bash
# cache-fill end to end: values equal the encoder's own output, h5py reads the cache as documented.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA

run "$TC_BIN/cache-fill" --input "$D/images.h5" --encoder cnn="$D/cnn.pt" --features images \
  --labels labels --key skeys --out "$WORK/c.h5" --threads 2
expect_rc 0
# The closing line, then the bottleneck report's (cache_fill_bottleneck.test.sh checks it), and on a
# busy machine a note (busy_machine.test.sh checks it).
expect_err_re "^cache-fill: $WORK/c.h5: 300 rows \(300 encoded\) in [0-9.]+ s, [0-9]+ rows/s; cnn \[300,32\] optimized"$'\n'"cache-fill: bound by [^"$'\n'"]*("$'\n'"cache-fill: other processes competed for the cores: [^"$'\n'"]*)?$"
expect_no_out
expect_file "$WORK/c.h5"
expect_no_file "$WORK/c.h5.partial"
expect_no_file "$WORK/c.h5.tmp"

# The h5py recipe of docs/cache-format.md (string keys), checked against the encoder run in Python;
# tests/python/cache_dataset.py runs the whole recipe on caches of every kind.
# Tolerance 1e-5 absolute: the optimised (oneDNN) module rounds differently from the plain one;
# the observed difference is ~1e-7 on values of order 0.1.
py "
import h5py, numpy as np, torch
with h5py.File('$WORK/c.h5', 'r') as f:
    assert f.attrs['format'] == 'traincache' and f.attrs['complete'] == 1
    emb = f['embeddings/cnn'][:]
    labels = f['labels'][:]
    keys = f['keys'].asstr()[:]
src = h5py.File('$D/images.h5', 'r')
x = torch.from_numpy(src['images'][:]).float() * np.float32(1 / 255)
with torch.no_grad():
    want = torch.jit.load('$D/cnn.pt').eval()(x).numpy()
np.save('$WORK/want.npy', want)  # PyTorch's embeddings, for the float16 check below
print(emb.shape, emb.dtype, float(np.abs(emb - want).max()) < 1e-5,
      bool((labels == src['labels'][:]).all()), keys[0], keys[-1])
"
expect_rc 0
expect_out "(300, 32) float32 True True img-0000 img-0299"

# --json: one document on stdout, nothing on stderr.
rm -f "$WORK/c.h5"
run "$TC_BIN/cache-fill" --input "$D/images.h5" --encoder "$D/cnn.pt" --features images \
  --out "$WORK/c.h5" --json --dtype float16
expect_rc 0
expect_err ""
py "
import json, sys
j = json.loads('''$out''')
print(j['schema'], j['status'], j['rows'], j['rows_encoded'], j['bytes_written'],
      j['encoders'][0]['name'], j['encoders'][0]['shape'], j['rows_per_second'] > 0)
"
expect_out "cache-fill/1 done 300 300 19200 cnn [300, 32] True"

# float16 storage is IEEE half for h5py, and within half precision of the float32 values.
py "
import h5py, numpy as np
e = h5py.File('$WORK/c.h5', 'r')['embeddings/cnn']
want = np.load('$WORK/want.npy')
print(e.dtype, bool(np.allclose(e[:], want, rtol=1e-3, atol=1e-4)))
"
expect_out "float16 True"

# Progress goes to stderr only: never without a terminal (above), forced with --progress always.
run "$TC_BIN/cache-fill" --input "$D/images.h5" --encoder "$D/cnn.pt" --features images \
  --out "$WORK/p.h5" --progress always --batch-size 100 -q
expect_rc 0
expect_no_out
expect_err_re $'^\rencoding \[\.{30}\] 0/300  - rows/s'  # the rate is unknown until half a second has passed
expect_err_re $'\rencoding \[#{30}\] 300/300  [0-9]+ rows/s'
finish
