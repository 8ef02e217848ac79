#!/usr/bin/env bash
# Sharded cache-fill (--shard I/N or RANK/WORLD_SIZE) and cache-fill merge: the merged cache holds
# exactly what a single-process fill writes; gaps, overlaps and mismatched shards are refused.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
A=(--input "$D/images.h5" --encoder cnn="$D/cnn.pt" --features images --labels labels --key skeys
   --batch-size 64 --threads 1 -q)
run "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/single.h5"
expect_rc 0

same_as_single() {  # FILE: datasets equal to the single-process fill, bit for bit
  py "
import h5py, numpy as np
a = h5py.File('$WORK/single.h5', 'r'); b = h5py.File('$1', 'r')
print(all(np.array_equal(a[k][:], b[k][:]) for k in ('embeddings/cnn', 'labels', 'keys')),
      int(b.attrs['rows']), int(b.attrs['row_start']), int(b.attrs['complete']))
"
  expect_out "True 300 0 1"
}

# Three shards one after another; shard ranges are whole batches (64 rows): 0..64, 64..192, 192..300.
for i in 0 1 2; do
  run "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/s.h5" --shard "$i/3"
  expect_rc 0
done
py "
import h5py
print([(int(f.attrs['row_start']), int(f.attrs['rows'])) for f in (h5py.File('$WORK/s.h5.shard-%d-of-3' % i, 'r') for i in range(3))])
"
expect_out "[(0, 64), (64, 128), (192, 108)]"
# A complete shard is not encoded again.
run "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/s.h5" --shard 1/3 -v
expect_rc 0
run "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/s.h5" --shard 1/3 --json
expect_out_has '"status":"up_to_date"'

run "$TC_BIN/cache-fill" merge --out "$WORK/virtual.h5" "$WORK"/s.h5.shard-2-of-3 "$WORK"/s.h5.shard-0-of-3 "$WORK"/s.h5.shard-1-of-3
expect_rc 0
expect_err "cache-fill: $WORK/virtual.h5: merged 3 shards (virtual datasets)"
same_as_single "$WORK/virtual.h5"
run "$TC_BIN/cache-fill" merge --copy --out "$WORK/copy.h5" "$WORK"/s.h5.shard-*
expect_rc 0
same_as_single "$WORK/copy.h5"
# A fill by one process over the merged cache is refused, saying whether it is this job (the
# fingerprints themselves differ in every part) or what differs.
run "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/virtual.h5"
expect_rc 73
expect_err "cache-fill: error: $WORK/virtual.h5: is a cache merged from shards (cache-fill merge) of this job: use --force to fill it again in one process, or run the job's shards to find them up to date"
run "$TC_BIN/cache-fill" "${A[@]}" --rows 0:100 --out "$WORK/virtual.h5"
expect_rc 73
expect_err "cache-fill: error: $WORK/virtual.h5: is a cache merged from shards (cache-fill merge) of another job (changed: input/job_rows): use --force to fill it again in one process, or run the job's shards to find them up to date"
run "$TC_BIN/cache-inspect" --check -v "$WORK/virtual.h5" "$WORK/copy.h5"
expect_rc 0
expect_out "$WORK/virtual.h5	ok
$WORK/copy.h5	ok"
# The merged cache's history is every shard's fill, then the merge (it was shard 0's alone).
run "$TC_BIN/cache-inspect" "$WORK/virtual.h5"
expect_out_has "history      1. fill of shard 0: 64 rows, 64 encoded
               2. fill of shard 1: 128 rows, 128 encoded
               3. fill of shard 2: 108 rows, 108 encoded
               4. merge: 300 rows, from 3 shards"
# A shard is not overwritten by a whole cache, with or without --update (exit 0 with a whole
# cache in the shard's place once broke the merged cache); the shard's own command still runs.
cp "$WORK/s.h5.shard-0-of-3" "$WORK/shard0.before"
for upd in "" --update; do
  run "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/s.h5.shard-0-of-3" $upd
  expect_rc 73
  expect_err_re "^cache-fill: error: $WORK/s\.h5\.shard-0-of-3: exists with another fingerprint \(changed: .*\): is shard 0 of 3 of a sharded job \(cache-fill --shard\); fill it with --shard 0/3 and merge the job again, or use --force to overwrite it$"
  expect_same "$WORK/s.h5.shard-0-of-3" "$WORK/shard0.before"
done
# And a plain cache whose encoder is named job_fingerprint is no merged cache to --update.
run "$TC_BIN/cache-fill" --input "$D/images.h5" --features images --encoder job_fingerprint="$D/cnn.pt" --rows 0:100 \
  --out "$WORK/jf.h5" -q
expect_rc 0
run "$TC_BIN/cache-fill" --input "$D/images.h5" --features images --encoder job_fingerprint="$D/cnn.pt" --rows 0:150 \
  --out "$WORK/jf.h5" -q --update --json
expect_rc 0
expect_out_has '"rows_encoded":50,"rows_copied":100'

# Two processes at once, as a launcher starts them (RANK/WORLD_SIZE), rank 0 merging.
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/w.h5" --merge &
done
wait
same_as_single "$WORK/w.h5"

# One process under a launcher (WORLD_SIZE=1, a one-GPU machine): --merge has nothing to merge, and
# the process writes the whole cache itself, no shard file beside it. Without a launcher, --merge
# still needs shards.
RANK=0 WORLD_SIZE=1 run "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/one.h5" --merge
expect_rc 0
same_as_single "$WORK/one.h5"
[ -z "$(ls "$WORK" | grep '^one\.h5\.')" ] || _fail "shard files beside one.h5: $(ls "$WORK" | grep '^one\.h5\.')"
run "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/one.h5" --merge
expect_rc 64
expect_err "cache-fill: error: --merge: needs --shard I/N (or RANK/WORLD_SIZE)"

# The documented torchrun launch (Debian's torch 1.13: see docs/distributed.md for the flags).
why=$(torchrun_unusable)
if [ -n "$why" ]; then
  echo "note: the torchrun launch is not checked here: $why"
elif command -v torchrun >/dev/null; then
  run timeout 180 torchrun --standalone --nproc_per_node 2 --redirects 2 --tee 2 --log_dir "$WORK/tr-logs" \
    --no_python "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/tr.h5" --merge
  expect_rc 0
  same_as_single "$WORK/tr.h5"
else
  _fail "torchrun is missing (python3-torch)"
fi

# --merge waits for the other shards at most --merge-timeout seconds, keeping its own shard.
run "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/lone.h5" --shard 0/2 --merge --merge-timeout 1
expect_rc 75
expect_err "cache-fill: error: --merge: gave up after 1 s waiting for $WORK/lone.h5.shard-1-of-2 (run their shards, then cache-fill merge)"
expect_file "$WORK/lone.h5.shard-0-of-2"
expect_no_file "$WORK/lone.h5"
run "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/lone.h5" --shard 0/2 --merge --merge-timeout -1
expect_rc 64
expect_err "cache-fill: error: --merge-timeout: must be a number >= 0, got '-1' (see --help)"

# Refusals.
run "$TC_BIN/cache-fill" merge --out "$WORK/bad.h5" "$WORK/s.h5.shard-0-of-3" "$WORK/s.h5.shard-2-of-3"
expect_rc 65
expect_err "cache-fill: error: merge: gap: rows 64..192 are in no shard (before $WORK/s.h5.shard-2-of-3)"
run "$TC_BIN/cache-fill" merge --out "$WORK/bad.h5" "$WORK/s.h5.shard-0-of-3" "$WORK/s.h5.shard-1-of-3"
expect_rc 65
expect_err "cache-fill: error: merge: gap: rows 192..300 are in no shard (after $WORK/s.h5.shard-1-of-3)"
run "$TC_BIN/cache-fill" merge --out "$WORK/bad.h5" "$WORK"/s.h5.shard-* "$WORK/s.h5.shard-1-of-3"
expect_rc 65
expect_err "cache-fill: error: merge: overlap: rows 64..192 of $WORK/s.h5.shard-1-of-3 are also in $WORK/s.h5.shard-1-of-3"
run "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/o.h5" --shard 0/3 --encoder cnn2="$D/cnn_other.pt" --features cnn2=images
expect_rc 0
run "$TC_BIN/cache-fill" merge --out "$WORK/bad.h5" "$WORK/o.h5.shard-0-of-3" "$WORK/s.h5.shard-1-of-3" "$WORK/s.h5.shard-2-of-3"
expect_rc 65
expect_err_re "^cache-fill: error: $WORK/s.h5.shard-[12]-of-3: belongs to another job than $WORK/o.h5.shard-0-of-3 \(encoders, options, input or shard count differ\)$"
run "$TC_BIN/cache-fill" merge --out "$WORK/bad.h5" "$WORK/single.h5"
expect_rc 65
expect_err "cache-fill: error: $WORK/single.h5: not a shard (no job_fingerprint; was it written with --shard?)"
expect_no_file "$WORK/bad.h5"
run "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/x.h5" --shard 3/3
expect_rc 64
expect_err "cache-fill: error: --shard: expected I/N with 0 <= I < N, got '3/3'"
run "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/x.h5" --shard 0/10
expect_rc 64
expect_err "cache-fill: error: --shard: 10 shards for only 5 batches"
# Under a launcher a bare --device cuda is the process's own GPU, cuda:LOCAL_RANK (one no machine
# here has: refused naming it, 69).
RANK=1 WORLD_SIZE=2 LOCAL_RANK=99 run "$TC_BIN/cache-fill" "${A[@]}" --out "$WORK/x.h5" --device cuda
expect_rc 69
expect_err_re "^cache-fill: error: --device cuda:99: "
finish
