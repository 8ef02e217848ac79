#!/usr/bin/env bash
# A damaged cache at the output (issue 84, items 2-4 and 7): the same command never calls it up to
# date, --update never copies its rows, and neither changes it: 65 naming the first problem and the
# command that fills it again. --update over the progress of an interrupted --force fill of the same
# input resumes that fill (its committed rows were thrown away, with a warning that said otherwise).
# A merged cache at the output with another fingerprint is 73, not an internal error.
source "$(dirname "$0")/../cli/lib.sh"
D=$TC_DATA

# 300 rows with keys, and the same with 20 rows rewritten (an update encodes those 20).
py "
import h5py, numpy as np
with h5py.File('$D/images.h5', 'r') as f:
    x, y = f['images'][:300], f['labels'][:300]
np.savez('$WORK/old.npz', images=x, labels=y, ids=np.arange(300))
x = x.copy()
x[100:120] = 255 - x[100:120]
np.savez('$WORK/new.npz', images=x, labels=y, ids=np.arange(300))
"
expect_rc 0
ARGS=(--features images --labels labels --key ids --encoder cnn="$D/cnn.pt" --batch-size 32 --threads 2 -q)
run "$TC_BIN/cache-fill" --input "$WORK/old.npz" --out "$WORK/good.h5" "${ARGS[@]}"
expect_rc 0

# damage NAME CODE: good.h5 copied to NAME.h5 and changed by Python CODE (h5py file f, numpy np).
damage() {
  cp "$WORK/good.h5" "$WORK/$1.h5"
  py "
import h5py, numpy as np
f = h5py.File('$WORK/$1.h5', 'r+')
def replace(name, data):
    attrs = dict(f[name].attrs)
    del f[name]
    f[name] = data
    f[name].attrs.update(attrs)
$2
f.close()
"
  expect_rc 0
  cp "$WORK/$1.h5" "$WORK/$1-before.h5"
}

# ---- the same command: up to date only when --check accepts the cache ---------------------------
run "$TC_BIN/cache-fill" --input "$WORK/old.npz" --out "$WORK/good.h5" "${ARGS[@]/-q/-v}"
expect_rc 0
expect_err "cache-fill: $WORK/good.h5: up to date (300 rows, fingerprint $(py "
import h5py; print(h5py.File('$WORK/good.h5', 'r').attrs['fingerprint'][:12])"; echo "$out"))"
while IFS='|' read -r name code problem; do
  damage "$name" "$code"
  run "$TC_BIN/cache-fill" --input "$WORK/old.npz" --out "$WORK/$name.h5" "${ARGS[@]}"
  expect_rc 65
  expect_err "cache-fill: error: $WORK/$name.h5: the cache is damaged ($problem); use --force to fill it again"
  expect_same "$WORK/$name.h5" "$WORK/$name-before.h5"
  expect_no_file "$WORK/$name.h5.partial"
done <<'EOF'
gone|del f['embeddings/cnn']|no datasets under /embeddings
short|[replace(n, f[n][:290]) for n in ('embeddings/cnn', 'labels', 'keys', 'row_digests')]; f.attrs['rows'] = 290|holds 290 rows, the fingerprint's input has 300
int|replace('embeddings/cnn', f['embeddings/cnn'][()].astype(np.int32))|/embeddings/cnn holds int32, not float32 or float16
nan|f['embeddings/cnn'][7, 3] = np.nan|/embeddings/cnn holds 1 NaN and 0 Inf values
labels|replace('labels', f['labels'][:280])|/labels has 280 rows, expected 300
keys|replace('keys', f['keys'][:280])|/keys has 280 rows, expected 300
digests|replace('row_digests', f['row_digests'][:280])|/row_digests has 280 rows, expected 300
two|replace('labels', f['labels'][:280]); replace('keys', f['keys'][:290])|/labels has 280 rows, expected 300; 1 more: cache-inspect --check lists them
nolabels|del f['labels']|/labels is missing: the fingerprint has labels
half|replace('embeddings/cnn', f['embeddings/cnn'][()].astype(np.float16))|/embeddings/cnn holds float16, the fingerprint says float32
EOF

# ---- gc-train refuses a damaged cache before it reads a row (item 8: 70 deep in training, or 0
# when a short run never drew the rows past the end) -----------------------------------------------
while IFS='|' read -r name code problem; do
  damage "g$name" "$code"
  for objective in "--loss supcon" "--loss softmax"; do
    run "$TC_BIN/gc-train" --cache "$WORK/g$name.h5" --embeddings cnn $objective --head linear:8 --batch-size 32 --chunk-size 8 \
      --steps 2 --out "$WORK/g$name.pt" -q
    expect_rc 65
    expect_err "gc-train: error: $WORK/g$name.h5: damaged: $problem (cache-inspect --check lists what is wrong)"
    expect_no_file "$WORK/g$name.pt"
  done
done <<'EOF'
labels|replace('labels', f['labels'][:280])|/labels has 280 rows, expected 300
rows|f.attrs['rows'] = 310|/embeddings/cnn has 300 rows, expected 310
embeddings|replace('embeddings/cnn', f['embeddings/cnn'][:299])|/embeddings/cnn has 299 rows, expected 300
EOF

# ---- --check reads /skipped and /keys as cache-fill writes them (item 14), and --verify refuses
# what --check refuses in structure (item 13: 64 "row out of range", or 1 "MISMATCH" for integer
# embeddings) ---------------------------------------------------------------------------------------
SKIP="f.create_dataset('skipped/rows', data=np.array([3, 7], np.int64))
f.create_dataset('skipped/reasons', data=['a', 'b'], dtype=h5py.string_dtype('utf-8'))"
damage skipped "$SKIP"
run "$TC_BIN/cache-inspect" --check "$WORK/skipped.h5"
expect_rc 0
while IFS='|' read -r name code problem; do
  damage "$name" "$code"
  run "$TC_BIN/cache-inspect" --check "$WORK/$name.h5"
  expect_rc 1
  expect_out "$WORK/$name.h5	$problem"
done <<EOF
ascii|$(printf '%s' "$SKIP" | sed "s/h5py.string_dtype('utf-8')/h5py.string_dtype('ascii')/" | tr '\n' ';')|/skipped/reasons is not a list of UTF-8 strings
past|$(printf '%s' "$SKIP" | sed 's/\[3, 7\]/[3, 300]/' | tr '\n' ';')|/skipped/rows holds 300, not a row of the cache after 3
negative|$(printf '%s' "$SKIP" | sed 's/\[3, 7\]/[-1, 7]/' | tr '\n' ';')|/skipped/rows holds -1, not a row of the cache after the start
unsorted|$(printf '%s' "$SKIP" | sed 's/\[3, 7\]/[7, 3]/' | tr '\n' ';')|/skipped/rows holds 3, not a row of the cache after 7
float|$(printf '%s' "$SKIP" | sed 's/np.int64/np.float64/' | tr '\n' ';')|/skipped/rows is not a list of integers (1-D)
twod|$(printf '%s' "$SKIP" | sed 's/np.array(\[3, 7\], np.int64)/np.array([[3], [7]], np.int64)/' | tr '\n' ';')|/skipped/rows is not a list of integers (1-D)
keys2d|replace('keys', np.stack([f['keys'][()], f['keys'][()]], 1))|/keys is not one key per row (1-D)
EOF
for name in int past; do
  cp "$WORK/$name-before.h5" "$WORK/$name.h5"
  run "$TC_BIN/cache-inspect" --verify 4 "$WORK/$name.h5"
  expect_rc 65
  expect_err_re "^cache-inspect: error: $WORK/$name.h5: damaged: .* \(cache-inspect --check lists what is wrong\)$"
done

# ---- --update copies rows only from a cache --check accepts -------------------------------------
for name in int nan short; do
  cp "$WORK/$name-before.h5" "$WORK/$name.h5"
  run "$TC_BIN/cache-fill" --input "$WORK/new.npz" --out "$WORK/$name.h5" "${ARGS[@]}" --update
  expect_rc 65
  expect_err_re "^cache-fill: error: $WORK/$name.h5: the cache is damaged \(.*\); use --force instead of --update to fill it again$"
  expect_same "$WORK/$name.h5" "$WORK/$name-before.h5"
  expect_no_file "$WORK/$name.h5.partial"
done
# What the message names works: --force fills it again, and the result passes --check.
run "$TC_BIN/cache-fill" --input "$WORK/new.npz" --out "$WORK/nan.h5" "${ARGS[@]}" --force
expect_rc 0
run "$TC_BIN/cache-inspect" --check "$WORK/nan.h5"
expect_rc 0
# An update of the sound cache still copies its 280 unchanged rows.
cp "$WORK/good.h5" "$WORK/u.h5"
run "$TC_BIN/cache-fill" --input "$WORK/new.npz" --out "$WORK/u.h5" "${ARGS[@]}" --update --json
expect_rc 0
expect_out_has '"rows_copied":280'

# ---- --update over an interrupted --force fill of the same input resumes it ---------------------
# 3,000 rows of big.h5 in batches of 64, committed every 256; the old cache holds 500 of them.
BIG=(--input "$D/big.h5" --features images --labels labels --encoder cnn="$D/cnn.pt" --batch-size 64
     --commit-rows 256 --threads 2)
run "$TC_BIN/cache-fill" "${BIG[@]}" --rows 0:500 --out "$WORK/r.h5" -q
expect_rc 0
run "$TC_BIN/cache-fill" "${BIG[@]}" --rows 0:3000 --out "$WORK/r-ref.h5" -q
expect_rc 0
"$TC_BIN/cache-fill" "${BIG[@]}" --rows 0:3000 --out "$WORK/r.h5" --force -q 2>/dev/null &
pid=$!
wait_committed "$WORK/r.h5.partial" 1024 && _ok || _fail "the --force fill committed no 1024 rows"
kill -KILL "$pid"
wait "$pid" 2>/dev/null
committed=$(grep -o '"committed_rows": [0-9]*' "$WORK/r.h5.partial/journal.json" | grep -o '[0-9]*$')
run "$TC_BIN/cache-fill" "${BIG[@]}" --rows 0:3000 --out "$WORK/r.h5" --update --json
expect_rc 0
expect_err_has "cache-fill: warning: $WORK/r.h5.partial: resuming an interrupted fill of this input ($committed of 3000 rows encoded) instead of updating $WORK/r.h5: it replaces the cache with every row encoded again"
expect_out_has "\"resumed_from\":$committed"
expect_same "$WORK/r.h5" "$WORK/r-ref.h5"
expect_no_file "$WORK/r.h5.partial"

# ---- a merged cache at the output, other rows: 73 naming --force; --update takes it -------------
run "$TC_BIN/cache-fill" "${BIG[@]}" --rows 0:256 --shard 0/2 --out "$WORK/m.h5" -q
expect_rc 0
run "$TC_BIN/cache-fill" "${BIG[@]}" --rows 0:256 --shard 1/2 --out "$WORK/m.h5" -q
expect_rc 0
run "$TC_BIN/cache-fill" merge --out "$WORK/m.h5" "$WORK"/m.h5.shard-*
expect_rc 0
run "$TC_BIN/cache-fill" "${BIG[@]}" --rows 0:300 --out "$WORK/m.h5" -q
expect_rc 73
expect_err_re "^cache-fill: error: $WORK/m.h5: .*use --force to (overwrite|fill) it"
run "$TC_BIN/cache-fill" "${BIG[@]}" --rows 0:300 --out "$WORK/m.h5" --update --json
expect_rc 0
expect_out_has '"rows":300,"rows_encoded":44,"rows_copied":256,'
finish
