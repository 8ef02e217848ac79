# Helpers of the cache-fill --update tests (sourced after lib.sh): the closing JSON's update fields,
# and how an updated cache is compared with a full fill of the same input on this machine.

# same_rows UPDATED FULL ONE: UPDATED (an update) holds the rows of FULL (a full fill of the same
# input) in the same order: labels, keys, skipped rows and row digests to the bit; embeddings within
# what the update allows (scripts/traincache_caches.py, as make bench compares them: each encoder's
# rows within 4 times the batch noise UPDATED records for it; max_abs_diff_expected in $out's JSON,
# read first, 4 times the largest of those), so that where a row's bits do
# not depend on its batch (the noise measured 0) the two are equal to the bit. The noise FULL records
# is what ONE (the same full fill in batches of one row) gives for the rows the tool probes: 16
# spread over the first batch, first and last included (for text, ordered by length: at most the
# largest difference over every row).
same_rows() {
  local allowed
  # max_abs_diff_allowed: 0.1's name of the same figure, written until 0.2.
  allowed=$("$TC_PYTHON" -c "import json, sys; u = json.load(open(sys.argv[1]))['update']
print(u['max_abs_diff_expected'] if u['max_abs_diff_allowed'] == u['max_abs_diff_expected'] else 'two figures')" \
    "$WORK/.update.json")
  py "
import sys
sys.path.insert(0, '$TC_SOURCE/scripts')
import h5py, numpy as np
import traincache_caches as tc
a, b, one = h5py.File('$1', 'r'), h5py.File('$2', 'r'), h5py.File('$3', 'r')
for name in ['row_digests', 'row_file_digests', 'labels', 'keys', 'skipped/rows', 'skipped/reasons']:
    if (name in a) != (name in b):
        print('only one has', name)
    elif name in b and not np.array_equal(a[name][()], b[name][()]):
        print(name, 'differs')
n = min(b.attrs['batch_size'], b.attrs['rows'])
k = min(16, n)
probe = [j * (n - 1) // (k - 1) for j in range(k)]
recorded = []
for e, (diff, allows, noise) in tc.update_differences('$1', '$2').items():
    recorded.append(noise)
    if diff > allows:
        print(e, 'differs by', diff, 'where the update allows', allows)
    y, z = (f['embeddings/' + e][()].astype(np.float64) for f in (b, one))
    full = b['embeddings/' + e].attrs['batch_max_abs_diff']
    if 'text' in b.attrs and full > np.abs(y - z).max() or 'text' not in b.attrs and full != np.abs(y[probe] - z[probe]).max():
        print(e, 'records a batch noise of', full)
if $allowed != tc.UPDATE_NOISE_FACTOR * max(recorded):
    print('allowed', $allowed)
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
