#!/usr/bin/env bash
# Several inputs per encoder, several encoders per pass, output selectors, row slices, dtypes.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA

# The encoders' outputs as PyTorch computes them from the inputs, each saved as REF/NAME.npy: made
# in one process (importing torch costs seconds a start); each check below reads its own.
mkdir "$WORK/ref"
py "
import h5py, numpy as np, torch
src = h5py.File('$D/tokens.h5', 'r'); img = h5py.File('$D/images.h5', 'r')
with torch.no_grad():
    np.save('$WORK/ref/text.npy', torch.jit.load('$D/text.pt').eval()(
        torch.from_numpy(src['input_ids'][:]), torch.from_numpy(src['attention_mask'][:])).numpy())
    x = torch.from_numpy(img['vec'][10:50])
    np.save('$WORK/ref/t.npy', torch.jit.load('$D/tuple.pt').eval()(x)[0].numpy())
    np.save('$WORK/ref/d.npy', torch.jit.load('$D/dict.pt').eval()(x)['emb'].numpy())
    x16 = torch.from_numpy(img['vec16'][:].astype(np.float32))
    np.save('$WORK/ref/mlp16.npy', torch.jit.load('$D/mlp.pt').eval()(x16).numpy())
print('ok')
"
expect_out "ok"

# Token ids + attention mask into a transformer; labels stored as int32.
run "$TC_BIN/cache-fill" --input "$D/tokens.h5" --encoder "$D/text.pt" \
  --features input_ids,attention_mask --labels labels --out "$WORK/t.h5"
expect_rc 0
# Tolerance 1e-4: the optimised transformer fuses ops (observed differences ~1e-6).
py "
import h5py, numpy as np
f = h5py.File('$WORK/t.h5', 'r')
want = np.load('$WORK/ref/text.npy')
e = f['embeddings/text']
print(e.shape, float(np.abs(e[:] - want).max()) < 1e-4, f['labels'].dtype,
      e.attrs['features'], f.attrs['features'])
"
expect_out '(200, 16) True int32 ["input_ids","attention_mask"] ["attention_mask","input_ids"]'

# Two encoders in one pass, each with its own output selector: tuple index and dict key.
run "$TC_BIN/cache-fill" --input "$D/images.h5" --encoder t="$D/tuple.pt" --encoder d="$D/dict.pt" \
  --features vec --output t=0 --output d=emb --rows 10:50 --key ikeys --out "$WORK/two.h5"
expect_rc 0
py "
import h5py, numpy as np
f = h5py.File('$WORK/two.h5', 'r')
t, d = np.load('$WORK/ref/t.npy'), np.load('$WORK/ref/d.npy')
print(sorted(f['embeddings']), f['embeddings/t'].shape, float(np.abs(f['embeddings/t'][:] - t).max()) < 1e-5,
      float(np.abs(f['embeddings/d'][:] - d).max()) < 1e-5, f.attrs['row_start'], f['keys'][0], f['keys'][-1],
      f['embeddings/t'].attrs['output'], f['embeddings/d'].attrs['output'])
"
expect_out "['d', 't'] (40, 8) True True 10 1010 1049 0 emb"

# float16 input datasets are fed as float32; --no-optimize records the plain path.
run "$TC_BIN/cache-fill" --input "$D/images.h5" --encoder "$D/mlp.pt" --features vec16 --no-optimize \
  --out "$WORK/h.h5" --batch-size 7
expect_rc 0
expect_err_re "mlp \[300,8\] plain"$'\n'
py "
import h5py, numpy as np
f = h5py.File('$WORK/h.h5', 'r')
want = np.load('$WORK/ref/mlp16.npy')
# rtol 1e-6: batches of 7 and of 300 block the matrix product differently in BLAS.
print(f['embeddings/mlp'].attrs['inference'], bool(np.allclose(f['embeddings/mlp'][:], want, rtol=1e-6, atol=1e-7)))
"
expect_out "plain True"

# --input-scale applies to uint8 inputs: A/B and decimal forms give the same cache.
run "$TC_BIN/cache-fill" --input "$D/images.h5" --encoder "$D/cnn.pt" --features images --rows :20 \
  --input-scale 2/255 --out "$WORK/s1.h5"
expect_rc 0
py "import h5py; print(round(float(h5py.File('$WORK/s1.h5','r').attrs['input_scale']) * 255, 6))"
expect_out "2.0"
finish
