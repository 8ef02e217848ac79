#!/usr/bin/env bash
# gc-train --data-cache: the converted rows of streamed inputs kept in shared-memory slabs (all of
# them, or the first fraction); the same batches and the same trained bytes as without, counted
# hits and misses, slabs shared between processes, kept with --data-cache-keep, repaired after a
# dead writer, and refused before training when /dev/shm cannot hold them.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
S=$TC_BIN/shm-cache
export TRAINCACHE_SHM_PREFIX="tc-test-dc-$$-"
trap 'rm -f /dev/shm/"$TRAINCACHE_SHM_PREFIX"*; rm -rf "$WORK"' EXIT

# Raw grouped mode on the 300 fixture images (3,136 bytes a row as float32), 2 epochs of 6 batches.
TRAIN=("$TC_BIN/gc-train" -q --json --data "$D/images.h5" --query images --labels labels --encoder "$D/cnn.pt"
  -b 50 -c 25 --epochs 2)
# cache_counts FILE: the data_cache record of a --json output as "hits misses stored slots".
cache_counts() {
  "$TC_PYTHON" -c "
import json, sys
c = json.load(open(sys.argv[1]))['data_cache']
print('none' if c is None else '%d %d %d %d' % (c['hits'], c['misses'], c['stored'], c['slots']))" "$1"
}
# trained NAME ARGS...: a run writing $WORK/NAME.pt and $WORK/NAME.json.
trained() {
  local name=$1
  shift
  tool "${TRAIN[@]}" "$@" --out "$WORK/$name.pt" > "$WORK/$name.json" 2> "$WORK/$name.err"
  rc=$?
  expect_rc 0
}

trained plain --stream
expect_eq "$(cache_counts "$WORK/plain.json")" "none"
# full: every row read once in epoch 1 and taken from the slab in epoch 2.
trained full --data-cache full
expect_same "$WORK/plain.pt" "$WORK/full.pt"
expect_eq "$(cache_counts "$WORK/full.json")" "300 300 300 300"
# stochastic:0.5 caches the first 150 rows: 150 hits in epoch 2, the other 150 read again.
trained half --data-cache stochastic:0.5
expect_same "$WORK/plain.pt" "$WORK/half.pt"
expect_eq "$(cache_counts "$WORK/half.json")" "150 450 150 150"
# A byte budget instead of the fraction: 313,600 bytes hold 100 rows.
trained budget --data-cache stochastic:1 --data-cache-limit 313600
expect_same "$WORK/plain.pt" "$WORK/budget.pt"
expect_eq "$(cache_counts "$WORK/budget.json")" "100 500 100 100"
# Temporary slabs are gone after the run.
expect_eq "$(ls /dev/shm | grep -c "^${TRAINCACHE_SHM_PREFIX}")" "0" "slabs left behind"

# Kept: the slab stays (all 300 rows filled) and the next run reads nothing.
trained kept --data-cache full --data-cache-keep dc
expect_same "$WORK/plain.pt" "$WORK/kept.pt"
run "$S" stat dc-0
expect_out_has "300 filled, 0 writing, 0 empty"
trained again --data-cache full --data-cache-keep dc
expect_same "$WORK/plain.pt" "$WORK/again.pt"
expect_eq "$(cache_counts "$WORK/again.json")" "600 0 0 300"
# A row left WRITING by a writer that died (pid 999999 does not exist) is repaired on attach,
# read again and stored: 599 hits.
OFF=$("$S" stat dc-0 --json | "$TC_PYTHON" -c "import json,sys; print(json.load(sys.stdin)['slab']['offsets']['states'])")
"$TC_PYTHON" -c "
import sys, struct
with open(sys.argv[1], 'r+b') as f:
    f.seek(int(sys.argv[2]) + 8 * 10); f.write(struct.pack('<Q', 1 | (999999 << 8)))" \
  "/dev/shm/${TRAINCACHE_SHM_PREFIX}dc-0" "$OFF"
run "$S" stat dc-0
expect_out_has "299 filled, 1 writing, 0 empty"
trained repaired --data-cache full --data-cache-keep dc
expect_same "$WORK/plain.pt" "$WORK/repaired.pt"
expect_eq "$(cache_counts "$WORK/repaired.json")" "599 1 1 300"
run "$S" stat dc-0
expect_out_has "300 filled, 0 writing, 0 empty"
# The kept name on other data: refused, the slab untouched.
run "$TC_BIN/gc-train" -q --data "$D/images.h5" --query vec --labels labels --encoder "$D/mlp.pt" -b 50 --steps 1 \
  --data-cache full --data-cache-keep dc
expect_rc 65
expect_err "gc-train: error: dc-0: slab holds other rows than this run's data (remove it: shm-cache rm dc-0)"
run "$S" rm dc-0
expect_rc 0

# Two processes at once share one slab: each trains exactly as alone, and between them every
# row was stored once.
tool "${TRAIN[@]}" --data-cache full --data-cache-keep shared --out "$WORK/p1.pt" > "$WORK/p1.json" 2>&1 &
P1=$!
tool "${TRAIN[@]}" --data-cache full --data-cache-keep shared --out "$WORK/p2.pt" > "$WORK/p2.json" 2>&1
rc2=$?
wait $P1
rc1=$?
expect_eq "$rc1 $rc2" "0 0"
expect_same "$WORK/plain.pt" "$WORK/p1.pt"
expect_same "$WORK/plain.pt" "$WORK/p2.pt"
stored=$("$TC_PYTHON" -c "
import json, sys
print(sum(json.load(open(f))['data_cache']['stored'] for f in sys.argv[1:]))" "$WORK/p1.json" "$WORK/p2.json")
expect_eq "$stored" "300"
run "$S" rm shared-0
expect_rc 0

# Two processes fill one kept slab and one is killed (SIGKILL) while filling: the other trains on
# to the same bytes as alone, and a later run finds the slab consistent and completes it.
"${TRAIN[@]}" --data-cache full --data-cache-keep killed --epochs 200 --metrics "$WORK/k.jsonl" > /dev/null 2>&1 &
PK=$!
for _ in $(seq 300); do [ -s "$WORK/k.jsonl" ] && break; sleep 0.1; done
"${TRAIN[@]}" --data-cache full --data-cache-keep killed --out "$WORK/survivor.pt" > /dev/null 2>&1 &
PS=$!
sleep 0.3
kill -KILL $PK
wait $PK
expect_eq "$?" "137" "the killed process"
wait $PS
expect_eq "$?" "0" "the survivor"
expect_same "$WORK/plain.pt" "$WORK/survivor.pt"
trained after --data-cache full --data-cache-keep killed
expect_same "$WORK/plain.pt" "$WORK/after.pt"
run "$S" stat killed-0
expect_out_has "300 filled, 0 writing, 0 empty"
run "$S" rm killed-0

# SIGINT while the slab is being filled: the run stops after its step (130) and removes its
# temporary slab; a slab it kept is consistent (no slot left being written).
for keep in "" "--data-cache-keep intr"; do
  "${TRAIN[@]}" --data-cache full $keep --epochs 200 --metrics "$WORK/m.jsonl" > /dev/null 2>&1 &
  P=$!
  for _ in $(seq 300); do [ -s "$WORK/m.jsonl" ] && break; sleep 0.1; done
  kill -INT $P
  wait $P
  expect_eq "$?" "130" "exit after SIGINT"
  rm -f "$WORK/m.jsonl"
done
expect_eq "$(ls /dev/shm | grep "^${TRAINCACHE_SHM_PREFIX}" | sed "s/^${TRAINCACHE_SHM_PREFIX}//")" "intr-0" "slabs after SIGINT"
run "$S" stat intr-0
expect_out_has " 0 writing, "
run "$S" rm intr-0

# Bad requests: usage errors (64), and a cache /dev/shm cannot hold refused before training (73).
for bad in "bogus|expected none, full, stochastic:F or smart:N,r, got 'bogus'" \
  "stochastic:0|stochastic:F needs a fraction 0 < F <= 1, got '0'" \
  "stochastic:1.5|stochastic:F needs a fraction 0 < F <= 1, got '1.5'" \
  "stochastic:|stochastic:F needs a fraction 0 < F <= 1, got ''"; do
  run "${TRAIN[@]}" --data-cache "${bad%%|*}"
  expect_rc 64
  expect_err "gc-train: error: --data-cache: ${bad#*|}"
done
run "${TRAIN[@]}" --data-cache full --data-cache-limit 1M
expect_rc 64
expect_err "gc-train: error: --data-cache-limit: needs --data-cache stochastic:F (the limit replaces F)"
run "${TRAIN[@]}" --data-cache-keep x
expect_rc 64
expect_err "gc-train: error: --data-cache-keep: needs --data-cache full or stochastic:F"
run "${TRAIN[@]}" --data-cache stochastic:1 --data-cache-limit 100
expect_rc 64
expect_err "gc-train: error: --data-cache-limit: the budget holds no row of 3.06 KiB"
run "$TC_BIN/gc-train" -q --cache "$D/../c.h5" --embeddings cnn --data-cache full
expect_rc 64
expect_err "gc-train: error: --data-cache: caches raw inputs; cached embeddings are shared between processes with --cache-shm"
# 1,000,000 rows of 1x256x256 images (unwritten chunks: a small file) would need 244 GiB as float32.
"$TC_PYTHON" -c "
import h5py, numpy as np, sys
with h5py.File(sys.argv[1], 'w') as f:
    f.create_dataset('images', (1000000, 1, 256, 256), np.uint8, chunks=(16, 1, 256, 256))
    f['labels'] = np.arange(1000000) % 10" "$WORK/huge.h5" || _fail "writing huge.h5"
run "$TC_BIN/gc-train" -q --data "$WORK/huge.h5" --query images --labels labels --encoder "$D/cnn.pt" --steps 1 \
  --data-cache full --out "$WORK/none.pt"
expect_rc 73
expect_err_re "^gc-train: error: --data-cache: the cache needs 244\.14 GiB but /dev/shm has .* free \(cache a part: stochastic:F or --data-cache-limit\)$"
expect_no_file "$WORK/none.pt"
expect_eq "$(ls /dev/shm | grep -c "^${TRAINCACHE_SHM_PREFIX}")" "0" "a slab was made"
finish
