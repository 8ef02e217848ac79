# Helpers of the cache-fill --update tests (sourced after lib.sh): the closing JSON's update fields,
# and how an updated cache is compared with a full fill of the same input on this machine.

# same_rows UPDATED FULL ONE: UPDATED (an update) holds the rows of FULL (a full fill of the same
# input) in the same order: labels, keys, skipped rows and row digests to the bit; embeddings within
# the encoder's batch noise on this machine, which the test measures itself from ONE (the same full
# fill in batches of one row): |UPDATED - FULL| <= 4 * max |FULL - ONE| over every row, so that where
# a row's bits do not depend on its batch (the noise measured 0) the two are equal to the bit. Also:
# the noise FULL records (batch_max_abs_diff: the first 8 rows alone against in the first batch) is
# exactly what ONE gives for those rows, and the update allows (max_abs_diff_allowed, in $out's
# JSON, read first) twice the noise UPDATED records.
same_rows() {
  local allowed
  allowed=$("$TC_PYTHON" -c "import json, sys; print(json.load(open(sys.argv[1]))['update']['max_abs_diff_allowed'])" \
    "$WORK/.update.json")
  py "
import h5py, numpy as np
a, b, one = h5py.File('$1', 'r'), h5py.File('$2', 'r'), h5py.File('$3', 'r')
for name in ['row_digests', 'labels', 'keys', 'skipped/rows', 'skipped/reasons']:
    if (name in a) != (name in b):
        print('only one has', name)
    elif name in b and not np.array_equal(a[name][()], b[name][()]):
        print(name, 'differs')
for e in b['embeddings']:
    x, y, z = (f['embeddings/' + e][()].astype(np.float64) for f in (a, b, one))
    noise = np.abs(y - z).max()
    if np.abs(x - y).max() > 4 * noise:
        print(e, 'differs by', np.abs(x - y).max(), 'with a batch noise of', noise)
    rows = min(8, b.attrs['batch_size'])
    if b['embeddings/' + e].attrs['batch_max_abs_diff'] != np.abs(y[:rows] - z[:rows]).max():
        print(e, 'records a batch noise of', b['embeddings/' + e].attrs['batch_max_abs_diff'])
    if $allowed != 2 * a['embeddings/' + e].attrs['batch_max_abs_diff']:
        print(e, 'allowed', $allowed)
print('same rows')
"
  expect_rc 0
  expect_eq "$out" "same rows" "$1 against $2"
}
# update_json KEY...: the closing JSON's update fields (and rows_encoded), one line; the JSON is
# kept for same_rows (in a file: the function runs in a subshell).
update_json() {
  printf '%s' "$out" >"$WORK/.update.json"
  "$TC_PYTHON" -c "
import json, sys
r = json.loads(sys.argv[1])
print(r['rows_encoded'], ' '.join(str(r['update'][k]) for k in sys.argv[2:]))" "$out" "$@"
}

# full_fill NAME ARGS...: full fills of ARGS into WORK/NAME-full.h5 and, in batches of one row,
# WORK/NAME-one.h5 (same_rows' references).
full_fill() {
  local name=$1
  shift
  run "$TC_BIN/cache-fill" "$@" --out "$WORK/$name-full.h5"
  expect_rc 0
  run "$TC_BIN/cache-fill" "$@" -b 1 --out "$WORK/$name-one.h5"
  expect_rc 0
}
