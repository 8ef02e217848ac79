#!/usr/bin/env bash
# Hostile inputs: self-merges and forged virtual datasets, files that claim more than they hold,
# FIFOs, NaN re-encodings, out-of-range options, labels and negatives of the wrong shape, empty
# datasets. Each gets its documented exit code and one line, and nothing stored is harmed.
source "$(dirname "$0")/../cli/lib.sh"
D=$TC_DATA
FILL=(--input "$D/images.h5" --encoder cnn="$D/cnn.pt" --features images --labels labels -q)
INSPECT="$TC_BIN/cache-inspect"

# ---- cache-fill merge onto one of its own shards: refused, the shard untouched
for i in 0 1; do tool "$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/s.h5" --shard $i/2 || _fail "shard $i"; done
S0="$WORK/s.h5.shard-0-of-2" S1="$WORK/s.h5.shard-1-of-2"
cp "$S0" "$WORK/s0.bak"
run "$TC_BIN/cache-fill" merge --out "$S0" "$S0" "$S1"
expect_rc 64
expect_err "cache-fill: error: $S0: is also one of the shards to merge ($S0); choose another output"
expect_same "$S0" "$WORK/s0.bak"
ln "$S1" "$WORK/hardlink.h5"
run "$TC_BIN/cache-fill" merge --out "$WORK/hardlink.h5" "$S0" "$S1"
expect_rc 64
run "$TC_BIN/cache-fill" merge --out "$WORK/m.h5" "$S0" "$S1" -q
expect_rc 0

# ---- a virtual dataset that maps onto its own file (h5py and cache-inspect segfaulted)
"$TC_PYTHON" - "$WORK/m.h5" "$WORK/self.h5" <<'PY'
import h5py, sys
with h5py.File(sys.argv[1]) as f, h5py.File(sys.argv[2], 'w') as g:
    for k, v in f.attrs.items(): g.attrs[k] = v
    for name in ['embeddings/cnn', 'labels']:
        d = f[name]
        lay = h5py.VirtualLayout(shape=d.shape, dtype=d.dtype)
        lay[:] = h5py.VirtualSource('.', '/' + name, shape=d.shape)
        g.create_virtual_dataset(name, lay)
PY
for mode in "" --stats "--head 2"; do
  run "$INSPECT" $mode "$WORK/self.h5"
  expect_rc 65
  expect_err "cache-inspect: error: $WORK/self.h5: a virtual dataset maps onto its own file (self-referencing merge)"
done
run "$INSPECT" --check "$WORK/self.h5"
expect_rc 1
expect_out "$WORK/self.h5	$WORK/self.h5: a virtual dataset maps onto its own file (self-referencing merge)"

# ---- a merged cache whose shard is missing (rows read as zeros) or replaced by another job's
mv "$S1" "$WORK/away.h5"
run "$INSPECT" --check "$WORK/m.h5"
expect_rc 1
expect_out "$WORK/m.h5	$WORK/m.h5: virtual source $S1 is missing (no such file or directory)"
run "$TC_BIN/gc-train" --cache "$WORK/m.h5" --embeddings cnn -b 50 --steps 1
expect_rc 65
tool "$TC_BIN/cache-fill" --input "$D/images.h5" --encoder cnn="$D/cnn_other.pt" --features images --labels labels \
  --out "$WORK/o.h5" --shard 1/2 -q
cp "$WORK/o.h5.shard-1-of-2" "$S1"
run "$INSPECT" --check "$WORK/m.h5"
expect_rc 1
expect_out "$WORK/m.h5	$WORK/m.h5: virtual source $S1 is not a complete shard of this cache's job"
mv "$WORK/away.h5" "$S1"
run "$INSPECT" --check "$WORK/m.h5"
expect_rc 0

# ---- a small file that claims terabytes: refused at once, before any read
"$TC_PYTHON" - "$WORK/m.h5" "$WORK/huge.h5" <<'PY'
import h5py, sys
with h5py.File(sys.argv[1]) as f, h5py.File(sys.argv[2], 'w') as g:
    for k, v in f.attrs.items():
        if k != 'merged_from' and k != 'merge': g.attrs[k] = v
    g.attrs['rows'] = 2**40
    g.create_dataset('embeddings/cnn', shape=(2**40, 32), dtype='f4', chunks=(1024, 32))
    g.create_dataset('labels', shape=(2**40,), dtype='i8', chunks=(4096,))
PY
for mode in "" --stats "--head 3"; do
  run timeout 20 "$INSPECT" $mode "$WORK/huge.h5"
  expect_rc 65
  expect_err_re "^cache-inspect: error: $WORK/huge.h5: /embeddings/cnn claims 140737488355328 bytes but the file has only [0-9]+ \(truncated or corrupt\)\$"
done
run timeout 20 "$INSPECT" --check "$WORK/huge.h5"
expect_rc 1
# A shape whose element count does not fit 63 bits (it wrapped into a small size before).
"$TC_PYTHON" - "$WORK/huge.h5" <<'PY'
import h5py, sys
with h5py.File(sys.argv[1], 'a') as g:
    del g['embeddings/cnn']
    g.create_dataset('embeddings/cnn', shape=(2**62, 4), dtype='f4', chunks=(1024, 4))
PY
run timeout 20 "$INSPECT" "$WORK/huge.h5"
expect_rc 65
expect_err "cache-inspect: error: $WORK/huge.h5: /embeddings/cnn: its shape does not fit 63 bits (corrupt file?)"

# ---- an /embeddings that cannot be listed (here a dataset, not a group) is a corrupt cache: the
# summary, --stats and --verify exited 0 and --verify said "ok" with no encoders
"$TC_PYTHON" - "$WORK/m.h5" "$WORK/noemb.h5" <<'PY'
import h5py, numpy as np, sys
with h5py.File(sys.argv[1]) as f, h5py.File(sys.argv[2], 'w') as g:
    for k, v in f.attrs.items():
        if k not in ('merged_from', 'merge'): g.attrs[k] = v
    g['embeddings'] = np.zeros(3)
PY
for mode in "" --stats "--verify 2"; do
  run "$INSPECT" $mode "$WORK/noemb.h5"
  expect_rc 65
  expect_err_re "^cache-inspect: error: $WORK/noemb.h5: /embeddings: cannot open group"
done

# ---- a FIFO is not a file: refused at once instead of blocking
mkfifo "$WORK/fifo"
run timeout 20 "$INSPECT" --check "$WORK/fifo"
expect_rc 1
expect_out "$WORK/fifo	$WORK/fifo: not a regular file"
run timeout 20 "$INSPECT" "$WORK/fifo"
expect_rc 66
expect_err "cache-inspect: error: $WORK/fifo: not a regular file"

# ---- --verify: a NaN re-encoding never matches
tool "$TC_BIN/cache-fill" --input "$D/images.h5" --encoder lg="$D/nan.pt" --features vec_pos --out "$WORK/lg.h5" -q \
  || _fail "fill lg"
"$TC_PYTHON" - "$D/images.h5" "$WORK/neg.h5" <<'PY'
import h5py, sys
with h5py.File(sys.argv[1]) as f, h5py.File(sys.argv[2], 'w') as g:
    g['vec_pos'] = -f['vec_pos'][:]
PY
run "$INSPECT" --verify 8 --input "$WORK/neg.h5" "$WORK/lg.h5" --json
expect_rc 1
expect_out_has '"mismatched":8'
expect_out_has '"ok":false'

# ---- values the options never meant
bad() {  # bad CODE MESSAGE CMD...
  local code=$1 msg=$2
  shift 2
  run "$@"
  expect_rc "$code"
  expect_err "$msg"
}
RAW=(--data "$D/pairs.h5" --query q --passage p --encoder "$D/tower.pt" --batch-size 32)
G="$TC_BIN/gc-train"
bad 64 "gc-train: error: --steps: must be a positive integer, got '-1' (see --help)" "$G" "${RAW[@]}" --steps -1
bad 64 "gc-train: error: --steps: must be a positive integer, got '0' (see --help)" "$G" "${RAW[@]}" --steps 0
bad 64 "gc-train: error: --clip-norm: must be a number >= 0, got '-1' (see --help)" "$G" "${RAW[@]}" --clip-norm -1
bad 64 "gc-train: error: --warmup-steps: must be an integer >= 0, got '-3' (see --help)" "$G" "${RAW[@]}" --warmup-steps -3
bad 64 "gc-train: error: --lr: must be a positive number, got 'nan' (see --help)" "$G" "${RAW[@]}" --lr nan
bad 64 "gc-train: error: --lr: must be a positive number, got '-1' (see --help)" "$G" "${RAW[@]}" --lr -1
bad 64 "gc-train: error: --input-scale: must be a finite number, got 'nan'" "$G" "${RAW[@]}" --input-scale nan
bad 64 "gc-train: error: --threads: must be an integer from 0 to 256, got '5000' (see --help)" "$G" "${RAW[@]}" --threads 5000
bad 64 "gc-train: error: --eval-rows: leaves no training rows (the data has 240)" "$G" "${RAW[@]}" --eval-rows 0:
bad 64 "cache-inspect: error: --rtol: must be a number >= 0, got '-1' (see --help)" "$INSPECT" --verify 2 --rtol -1 "$WORK/m.h5"
bad 64 "cache-inspect: error: --atol: must be a number >= 0, got '-0.5' (see --help)" "$INSPECT" --verify 2 --atol -0.5 "$WORK/m.h5"
bad 64 "cache-fill: error: --input-scale: must be a finite number, got 'nan'" "$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/x.h5" --input-scale nan
bad 64 "cache-fill: error: --threads: must be an integer from 0 to 256, got '5000' (see --help)" "$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/x.h5" --threads 5000

# ---- sizes beyond the machine's memory say what needed how much (was "internal error: std::bad_alloc")
# (65535 is the largest side --resize takes, as in cache-fill's spec: smart-bench shares its parser)
run "$TC_BIN/smart-bench" --data "$D/big.h5" --strategy none --resize 65535,65535 --epochs 1
expect_rc 69
expect_err_re "^smart-bench: error: --resize 65535,65535: needs 1023.97 GiB of memory but this machine has [0-9.]+ [GT]iB\$"

# ---- labels that are not one value per row (gc-train flattened [N,2] to 2N labels)
"$TC_PYTHON" - "$D/images.h5" "$WORK/lab2.h5" <<'PY'
import h5py, numpy as np, sys
with h5py.File(sys.argv[1]) as f, h5py.File(sys.argv[2], 'w') as g:
    g['images'] = f['images'][:]
    g['labels2'] = np.stack([f['labels'][:], f['labels'][:]], 1)
    g['empty'] = np.zeros((0, 1, 28, 28), np.uint8)
PY
tool "$TC_BIN/cache-fill" --input "$WORK/lab2.h5" --encoder cnn="$D/cnn.pt" --features images --labels labels2 \
  --out "$WORK/l2.h5" -q || _fail "fill l2"
bad 65 "gc-train: error: $WORK/l2.h5: /labels must hold one value per row, not rows of shape [2]" \
  "$G" --cache "$WORK/l2.h5" --embeddings cnn -b 50 --steps 1

# ---- an empty dataset says so
bad 65 "cache-fill: error: $WORK/lab2.h5: dataset 'empty' has no rows: nothing to encode" \
  "$TC_BIN/cache-fill" --input "$WORK/lab2.h5" --encoder cnn="$D/cnn.pt" --features empty --out "$WORK/e.h5"

# ---- hard negatives whose rows do not have the passages' shape: bad data, not an internal error
"$TC_PYTHON" - "$D/pairs.h5" "$WORK/negs.h5" <<'PY'
import h5py, numpy as np, sys
with h5py.File(sys.argv[1]) as f, h5py.File(sys.argv[2], 'w') as g:
    g['q'] = f['q'][:]; g['p'] = f['p'][:]; g['negs5'] = np.zeros((240, 2, 5), np.float32)
PY
bad 65 "gc-train: error: $WORK/negs.h5: negatives 'negs5' must be shaped [rows, k, ...] like the passages" \
  "$G" --data "$WORK/negs.h5" --query q --passage p --negatives negs5 --encoder "$D/tower.pt" --batch-size 32 --steps 1

# ---- --resume compares paths as the file system resolves them ("pairs.h5" is "$D/pairs.h5")
( cd "$D" && tool "$G" --data pairs.h5 --query q --passage p --encoder tower.pt --batch-size 32 --steps 2 \
    --checkpoint-dir "$WORK/ck" -q ) || _fail "first run"
run "$G" "${RAW[@]}" --steps 4 --checkpoint-dir "$WORK/ck" --resume
expect_rc 0
expect_err_has "resuming at step 2"
run "$G" "${RAW[@]}" --steps 4 --checkpoint-dir "$WORK/ck" --resume --temperature 0.1
expect_rc 65
expect_err "gc-train: error: $WORK/ck/checkpoint.pt: checkpoint was written with other settings (changed: loss)"

finish
