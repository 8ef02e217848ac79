#!/usr/bin/env bash
# Fingerprints: an unchanged re-run is a no-op; any change is refused with what changed; --force.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
cp "$D/images.h5" "$WORK/in.h5"
cp "$D/cnn.pt" "$WORK/enc.pt"
fill() { run "$TC_BIN/cache-fill" --input "$WORK/in.h5" --encoder cnn="$WORK/enc.pt" --features images \
  --labels labels --out "$WORK/c.h5" "$@"; }

fill
expect_rc 0
cp "$WORK/c.h5" "$WORK/first.h5"
fp=$("$TC_PYTHON" -c "import h5py; print(h5py.File('$WORK/c.h5','r').attrs['fingerprint'])")

fill
expect_rc 0
expect_err "cache-fill: $WORK/c.h5: up to date (300 rows, fingerprint ${fp:0:12})"
expect_same "$WORK/c.h5" "$WORK/first.h5"

fill --json
expect_rc 0
expect_out_has '"status":"up_to_date"'

# On the CPU the inputs, the fingerprint and the cache already there are checked before LibTorch
# is loaded (libtraincache_engines.so): an up-to-date cache needs none, nor does refusing one in
# the way. A file that cannot be the module shows that it was not loaded.
export TRAINCACHE_ENGINES_MODULE="$WORK/none.so"
fill
expect_rc 0
expect_err "cache-fill: $WORK/c.h5: up to date (300 rows, fingerprint ${fp:0:12})"
fill --batch-size 7
expect_rc 73
expect_err "cache-fill: error: $WORK/c.h5: exists with another fingerprint (changed: options/batch_size): only the input's data, labels, keys or batch size changed; use --update to encode only the new and changed rows, or --force to encode every row"
unset TRAINCACHE_ENGINES_MODULE

# --no-tf32 changes nothing on the CPU (float32 there is always IEEE): the same fingerprint. The
# math mode is recorded per embedding dataset and reported.
fill --no-tf32 --json
expect_rc 0
expect_out_has '"status":"up_to_date"'
expect_out_has '"math_mode":"ieee"'
expect_eq "$("$TC_PYTHON" -c "import h5py; print(h5py.File('$WORK/c.h5','r')['embeddings/cnn'].attrs['math_mode'])")" ieee \
  "math_mode attribute"
run "$TC_BIN/cache-inspect" "$WORK/c.h5" --json
expect_rc 0
expect_out_has '"math_mode":"ieee"'

fill --dtype float16
expect_rc 73
expect_err "cache-fill: error: $WORK/c.h5: exists with another fingerprint (changed: options/dtype); use --force to overwrite it"
expect_same "$WORK/c.h5" "$WORK/first.h5"

fill --rows 0:100 --batch-size 32
expect_rc 73
expect_err "cache-fill: error: $WORK/c.h5: exists with another fingerprint (changed: input/content_xxh3, input/rows, options/batch_size): only the input's data, labels, keys or batch size changed; use --update to encode only the new and changed rows, or --force to encode every row"

cp "$D/cnn_other.pt" "$WORK/enc.pt"
fill
expect_rc 73
expect_err "cache-fill: error: $WORK/c.h5: exists with another fingerprint (changed: encoders/cnn/sha256); use --force to overwrite it"
cp "$D/cnn.pt" "$WORK/enc.pt"

"$TC_PYTHON" -c "import h5py; f = h5py.File('$WORK/in.h5', 'r+'); f['images'][7, 0, 0, 0] ^= 1"
fill
expect_rc 73
expect_err "cache-fill: error: $WORK/c.h5: exists with another fingerprint (changed: input/content_xxh3): only the input's data, labels, keys or batch size changed; use --update to encode only the new and changed rows, or --force to encode every row"
expect_same "$WORK/c.h5" "$WORK/first.h5"

fill --force
expect_rc 0
expect_err_re "^cache-fill: $WORK/c.h5: 300 rows \(300 encoded\)"
fp2=$("$TC_PYTHON" -c "import h5py; print(h5py.File('$WORK/c.h5','r').attrs['fingerprint'])")
[ "$fp2" != "$fp" ] && _ok || _fail "--force must store the new fingerprint"

# Something that is not a cache is never overwritten without --force.
echo "precious" > "$WORK/notes.h5"
run "$TC_BIN/cache-fill" --input "$WORK/in.h5" --encoder "$WORK/enc.pt" --features images --out "$WORK/notes.h5"
expect_rc 73
expect_err "cache-fill: error: $WORK/notes.h5: exists and is not a readable traincache cache (not an HDF5 file); use --force to overwrite it"
expect_eq "$(cat "$WORK/notes.h5")" "precious"
finish
