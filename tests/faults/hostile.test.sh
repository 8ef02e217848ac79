#!/usr/bin/env bash
# What a hostile test found (issue 43): FIFOs planted at slab names and named as encoder files never
# hang a tool; a repeated data option is refused instead of silently taking the last; paths that are
# not UTF-8 give results, not an internal error; every shard of an impossible split refuses alike;
# shm-cache offers only the dtypes it accepts. Every command runs under `timeout`: a hang is a
# failure (exit 124), not a stuck suite.
source "$(dirname "$0")/../cli/lib.sh"
D=$TC_DATA
export TRAINCACHE_SHM_PREFIX="tchostile-$$-"
trap 'rm -f /dev/shm/"$TRAINCACHE_SHM_PREFIX"*; rm -rf "$WORK"' EXIT
T="timeout 20"

# ---- a FIFO at a slab's name (/dev/shm is writable by everyone): refused at once, 65 -------------
mkfifo "/dev/shm/${TRAINCACHE_SHM_PREFIX}planted"
for cmd in "stat planted" "get planted 0"; do
  run $T "$TC_BIN/shm-cache" $cmd
  expect_rc 65
  expect_err "shm-cache: error: planted: not a traincache slab (/dev/shm/${TRAINCACHE_SHM_PREFIX}planted is a FIFO)"
done
run $T "$TC_BIN/cache-fill" --input shm:planted --encoder "$D/cnn.pt" --out "$WORK/p.h5" -q
expect_rc 65
expect_err "cache-fill: error: planted: not a traincache slab (/dev/shm/${TRAINCACHE_SHM_PREFIX}planted is a FIFO)"
run $T "$TC_BIN/gc-train" --query shm:planted --passage shm:planted --encoder "$D/cnn.pt" --batch-size 4 --steps 1 \
  --out "$WORK/p.pt" -q
expect_rc 65
expect_err "gc-train: error: planted: not a traincache slab (/dev/shm/${TRAINCACHE_SHM_PREFIX}planted is a FIFO)"
run $T "$TC_BIN/smart-bench" --shm planted --strategy none --epochs 1
expect_rc 65
expect_err "smart-bench: error: planted: not a traincache slab (/dev/shm/${TRAINCACHE_SHM_PREFIX}planted is a FIFO)"

# ---- a FIFO named as an encoder file or a baseline: 66, as for any input that is not a file ------
mkfifo "$WORK/enc.pt" "$WORK/base.json"
run $T "$TC_BIN/cache-fill" --input "$D/images.h5" --features images --encoder "$WORK/enc.pt" --out "$WORK/f.h5" -q
expect_rc 66
expect_err "cache-fill: error: $WORK/enc.pt: not a regular file (a FIFO)"
run $T "$TC_BIN/gc-train" --data "$D/images.h5" --query images --labels labels --encoder "$WORK/enc.pt" \
  --batch-size 4 --steps 1 --out "$WORK/f.pt" -q
expect_rc 66
expect_err "gc-train: error: $WORK/enc.pt: not a regular file (a FIFO)"
run "$TC_BIN/cache-fill" --input "$D/images.h5" --features images --labels labels --encoder cnn="$D/cnn.pt" \
  --rows 0:64 --out "$WORK/c.h5" -q
expect_rc 0
run $T "$TC_BIN/cache-inspect" --verify 2 --encoder cnn="$WORK/enc.pt" "$WORK/c.h5"
expect_rc 66
expect_err "cache-inspect: error: $WORK/enc.pt: not a regular file (a FIFO)"
run $T "$TC_BIN/smart-bench" --data "$D/images.h5" --strategy none --epochs 1 -b 50 --baseline "$WORK/base.json"
expect_rc 66
expect_err "smart-bench: error: $WORK/base.json: not a regular file (a FIFO)"

# ---- a repeated data option is refused (it trained on the last of two caches, silently) ----------
cp "$WORK/c.h5" "$WORK/c2.h5"
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --cache "$WORK/c2.h5" --embeddings cnn --head linear:4 --batch-size 8 \
  --steps 1 -q
expect_rc 64
expect_err "gc-train: error: --cache: given 2 times; give it once (only the last would be used, silently)"
run "$TC_BIN/cache-fill" --input "$D/images.h5" --input "$D/images.h5" --features images --encoder "$D/cnn.pt" \
  --out "$WORK/r.h5" -q
expect_rc 64
expect_err "cache-fill: error: --input: given 2 times; give it once (only the last would be used, silently)"
expect_no_file "$WORK/r.h5"

# ---- paths that are not UTF-8: a cache, its summary as JSON and a checkpoint (were 70, json 316) --
BAD=$'caf\xe9'
cp "$D/images.h5" "$WORK/$BAD.h5"
run "$TC_BIN/cache-fill" --input "$WORK/$BAD.h5" --features images --labels labels --encoder cnn="$D/cnn.pt" \
  --rows 0:64 --out "$WORK/$BAD-cache.h5" -q
expect_rc 0
run "$TC_BIN/cache-inspect" --json "$WORK/$BAD-cache.h5"
expect_rc 0
printf '%s' "$out" | "$TC_PYTHON" -c "import json, sys; d = json.load(sys.stdin); print(d['files'][0]['rows'], d['files'][0]['path'].endswith('caf\ufffd-cache.h5'))" \
  > "$WORK/json.out" 2>&1
[ "$(cat "$WORK/json.out")" = "64 True" ] && _ok || _fail "cache-inspect --json of a non-UTF-8 path: $(cat "$WORK/json.out")"
run "$TC_BIN/gc-train" --cache "$WORK/$BAD-cache.h5" --embeddings cnn --head linear:4 --batch-size 8 --steps 2 \
  --checkpoint-dir "$WORK/$BAD-ck" --checkpoint-every 1 --out "$WORK/h.pt" -q
expect_rc 0
expect_file "$WORK/h.pt"

# ---- every shard of an impossible split refuses, before encoding ---------------------------------
# 22 rows in batches of 256 are one batch: shard 1 of 2 encoded it and exited 0, shard 0 refused.
for i in 0 1; do
  run "$TC_BIN/cache-fill" --input "$D/images.h5" --features images --encoder "$D/cnn.pt" --rows 0:22 --batch-size 256 \
    --shard $i/2 --out "$WORK/s.h5" -q
  expect_rc 64
  expect_err "cache-fill: error: --shard: 2 shards for only 1 batches"
done
expect_no_file "$WORK/s.h5.shard-1-of-2"

# ---- shm-cache lists the element types it takes ('string' was listed, then refused) -------------
run "$TC_BIN/shm-cache" create x --len 4 --dims 2 --dtype float33
expect_rc 64
expect_err "shm-cache: error: float33: unknown dtype (valid: uint8, int8, uint16, int16, uint32, int32, uint64, int64, float16, float32, float64)"
run "$TC_BIN/shm-cache" create x --len 4 --dims 2 --dtype string
expect_rc 64
finish
