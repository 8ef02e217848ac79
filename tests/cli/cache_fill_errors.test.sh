#!/usr/bin/env bash
# Every bad input: one line on stderr, its exit code, and no output or partial file left behind.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
O="$WORK/out.h5"

# expect_fail CODE MESSAGE ARGS...: runs cache-fill --out $O ARGS and checks all of the above.
expect_fail() {
  local code=$1 msg=$2
  shift 2
  run "$TC_BIN/cache-fill" --out "$O" "$@"
  expect_rc "$code"
  expect_err "$msg"
  expect_no_out
  expect_no_file "$O"
  expect_no_file "$O.partial"
  expect_no_file "$O.tmp"
}

expect_fail 66 "cache-fill: error: $WORK/none.h5: no such file or directory" \
  --input "$WORK/none.h5" --encoder "$D/cnn.pt" --features images
expect_fail 65 "cache-fill: error: $D/notes.txt: not an HDF5 file" \
  --input "$D/notes.txt" --encoder "$D/cnn.pt" --features images
expect_fail 65 "cache-fill: error: $D/truncated.h5: cannot open HDF5 file (corrupt?): unable to open file" \
  --input "$D/truncated.h5" --encoder "$D/cnn.pt" --features images
expect_fail 65 "cache-fill: error: $D/images.h5: no dataset 'pixels'" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --features pixels
expect_fail 65 "cache-fill: error: $D/images.h5: no dataset 'nolabels'" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --features images --labels nolabels
expect_fail 65 "cache-fill: error: $D/images.h5: rows mismatch: 'images' has 300 rows but 'labels_short' has 299" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --features images --labels labels_short
expect_fail 65 "cache-fill: error: $D/images.h5: dataset 'skeys' has dtype string; an encoder input must be integer or floating point" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --features skeys
expect_fail 65 "cache-fill: error: $D/images.h5: dataset 'scalar' is a scalar; expected [rows, ...]" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --features scalar
expect_fail 66 "cache-fill: error: $WORK/none.pt: no such file or directory" \
  --input "$D/images.h5" --encoder "$WORK/none.pt" --features images
expect_fail 65 "cache-fill: error: $D/not-torchscript.pt: cannot load TorchScript module: PytorchStreamReader failed reading zip archive: failed finding central directory" \
  --input "$D/images.h5" --encoder "$D/not-torchscript.pt" --features images
# What was fed, and (issue 43, item 17) the likely cause when it stands out: ids into an image model.
expect_fail 65 "cache-fill: error: encoder 'cnn': rejected the input ([256, 16] float32): RuntimeError: Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [256, 16]" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --features vec
# (LibTorch's own words differ between versions: only what traincache adds is matched exactly.)
run "$TC_BIN/cache-fill" --out "$O" --input "$D/images.h5" --encoder "$D/cnn.pt" --features labels
expect_rc 65
expect_err_re "^cache-fill: error: encoder 'cnn': rejected the input \(\[256\] int64\): RuntimeError: .* \(token ids fed to a model that takes images or vectors\?\)$"
expect_no_file "$O"
expect_fail 65 "cache-fill: error: encoder 'nan': embedding of input row 0 holds NaN or Inf" \
  --input "$D/images.h5" --encoder "$D/nan.pt" --features vec
expect_fail 65 "cache-fill: error: encoder 'tuple': output is a tuple; select a tensor with --output KEY|INDEX" \
  --input "$D/images.h5" --encoder "$D/tuple.pt" --features vec
expect_fail 65 "cache-fill: error: encoder 'tuple': --output 5 out of range: the output has 2 elements" \
  --input "$D/images.h5" --encoder "$D/tuple.pt" --features vec --output 5
# An index beyond 64 bits was a std::stoul exception: exit 70 and OUT.partial left behind.
expect_fail 65 "cache-fill: error: encoder 'tuple': --output 99999999999999999999 out of range: the output has 2 elements" \
  --input "$D/images.h5" --encoder "$D/tuple.pt" --features vec --output 99999999999999999999
expect_fail 65 "cache-fill: error: encoder 'dict': output has no key 'nope' (its keys: 'emb', 'norm')" \
  --input "$D/images.h5" --encoder "$D/dict.pt" --features vec --output nope
expect_fail 65 "cache-fill: error: encoder 'dict': output is a dict (its keys: 'emb', 'norm'); select a tensor with --output KEY|INDEX" \
  --input "$D/images.h5" --encoder "$D/dict.pt" --features vec
no_cuda
expect_fail 69 "cache-fill: error: --device $NO_CUDA: $NO_CUDA_WHY" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --features images --device $NO_CUDA
expect_fail 64 "cache-fill: error: --device: expected cpu or cuda[:N], got 'gpu'" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --features images --device gpu
expect_fail 64 "cache-fill: error: --rows: 0:400 is outside the input's 300 rows" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --features images --rows 0:400
expect_fail 64 "cache-fill: error: --rows: expected A:B, got '12'" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --features images --rows 12
expect_fail 64 "cache-fill: error: the following argument was not expected: --bogus (see --help)" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --features images --bogus
expect_fail 64 "cache-fill: error: --batch-size: must be a positive integer, got '0' (see --help)" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --features images --batch-size 0
expect_fail 64 "cache-fill: error: --input is required (see --help)" \
  --encoder "$D/cnn.pt" --features images
expect_fail 64 "cache-fill: error: --features: no input dataset for encoder 'cnn'" \
  --input "$D/images.h5" --encoder "$D/cnn.pt"
expect_fail 64 "cache-fill: error: --features: no encoder named 'txt' (have: cnn)" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --features txt=images
expect_fail 64 "cache-fill: error: --encoder: encoder name 'cnn' given twice" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --encoder cnn="$D/cnn_other.pt" --features images
expect_fail 64 "cache-fill: error: --encoder: encoder name 'caf�' is not UTF-8 (it names a dataset of the cache)" \
  --input "$D/images.h5" --encoder "$(printf 'caf\xe9')=$D/cnn.pt" --features images
expect_fail 64 "cache-fill: error: --input-scale: not a number: 'half'" \
  --input "$D/images.h5" --encoder "$D/cnn.pt" --features images --input-scale half

# A non-deterministic encoder: a warning about the optimised module, then the refusal.
run "$TC_BIN/cache-fill" --out "$O" --input "$D/images.h5" --encoder "$D/dropout.pt" --features vec \
  --check-determinism --no-optimize
expect_rc 65
expect_err "cache-fill: error: encoder 'dropout': not deterministic: two runs on the first batch differ (dropout or randomness left on?)"
expect_no_file "$O"
expect_no_file "$O.partial"

# Counts that are not counts (issue 84, messages): a 309-digit range for -5, and a value past int64
# taken as INT64_MAX in silence.
for bad in "--length-window|-5|must be an integer >= 0" "--length-window|1.5|must be an integer >= 0" \
           "--max-tokens|99999999999999999999|must be an integer from 0 to 9223372036854775807"; do
  IFS='|' read -r flag value why <<<"$bad"
  run "$TC_BIN/cache-fill" --input "$D/images.h5" --features images --encoder cnn="$D/cnn.pt" --out "$O" "$flag" "$value"
  expect_rc 64
  expect_err "cache-fill: error: $flag: $why, got '$value' (see --help)"
done

# An encoder file replaced between its digest and its load (a training job saving over it): the
# fingerprint would name the old file over the new one's rows. Refused, 75, nothing kept; the same
# command then runs. The window is held open by the test hook; the journal directory appears
# after the digest, before the load.
cp "$D/cnn.pt" "$WORK/swap.pt"
cp "$D/cnn.pt" "$WORK/new.pt"
TRAINCACHE_TEST_ENCODER_LOAD_DELAY_MS=4000 "$TC_BIN/cache-fill" --input "$D/images.h5" --features images \
  --encoder cnn="$WORK/swap.pt" --out "$O" 2>"$WORK/swap.err" &
pid=$!
for _ in $(seq 1 200); do [ -d "$O.partial" ] && break; sleep 0.05; done
mv "$WORK/new.pt" "$WORK/swap.pt"
wait "$pid"
rc=$?
err=$(cat "$WORK/swap.err")
expect_rc 75
expect_err "cache-fill: error: $WORK/swap.pt: changed between its digest and its load (written or replaced); run again"
expect_no_file "$O"
expect_no_file "$O.partial"
run "$TC_BIN/cache-fill" --input "$D/images.h5" --features images --encoder cnn="$WORK/swap.pt" --out "$O" -q
expect_rc 0
rm -f "$O"
finish
