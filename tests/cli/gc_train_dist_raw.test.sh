#!/usr/bin/env bash
# Data-parallel gc-train on raw inputs over c10d/Gloo on loopback: W ranks x B/W rows train exactly
# like one process with batch B (--stream, --data-cache full and smart, 3 ranks, any chunk size,
# separate encoders, --no-gradcache); progress and logs are rank 0's.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/dist_lib.sh"

# ---- exactness: raw tied encoder with hard negatives, float32, 4 SGD steps over shuffled batches
RAW=(--data "$D/pairs.h5" --query q --passage p --negatives negs --encoder "$D/tower.pt" --batch-size 40
     --chunk-size 7 --optimizer sgd --lr 0.5 --similarity dot --temperature 0.5 --steps 4 --seed 5 --threads 1)
run "$TC_BIN/gc-train" "${RAW[@]}" --out "$WORK/raw1.pt" --json
expect_rc 0
loss1=$(printf '%s' "$out" | "$TC_PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["loss"])')
launch 2 raw2 "${RAW[@]}" --out "$WORK/raw2.pt" --json
expect_ranks_ok 2 raw2
same_params "$WORK/raw1.pt" "$WORK/raw2.pt" "$D/tower.pt"
# --stream: each rank reads only its own rows of every batch from the file; the same result.
launch 2 raws "${RAW[@]}" --stream --out "$WORK/raws.pt"
expect_ranks_ok 2 raws
same_params "$WORK/raw1.pt" "$WORK/raws.pt" "$D/tower.pt"
# --data-cache: the two ranks fill one slab per input between them (each reads its own half of
# every batch; 4 batches of 40 distinct rows: 160 rows filled once) and train as one process.
launch 2 rawdc "${RAW[@]}" --data-cache full --data-cache-keep dd --out "$WORK/rawdc.pt"
expect_ranks_ok 2 rawdc
same_params "$WORK/raw1.pt" "$WORK/rawdc.pt" "$D/tower.pt"
for i in 0 1 2; do
  run "$TC_BIN/shm-cache" stat "dd-$i"
  expect_out_has "160 filled, 0 writing"
  run "$TC_BIN/shm-cache" rm "dd-$i"
done
# --data-cache smart: the ranks share one window slab per input (each rank's replacer prepares
# every other incoming row) and train as one process on the window's batches: 2 epochs of a
# 120-row window (3 batches each), 30 rows replaced.
SMART=(--data "$D/pairs.h5" --query q --passage p --negatives negs --encoder "$D/tower.pt" --batch-size 40
       --chunk-size 7 --optimizer sgd --lr 0.5 --similarity dot --temperature 0.5 --epochs 2 --seed 5 --threads 1
       --data-cache smart:120,0.25)
run "$TC_BIN/gc-train" "${SMART[@]}" --out "$WORK/smart1.pt"
expect_rc 0
launch 2 smart2 "${SMART[@]}" --out "$WORK/smart2.pt" --json
expect_ranks_ok 2 smart2
same_params "$WORK/smart1.pt" "$WORK/smart2.pt" "$D/tower.pt"
py "
import json
c = json.load(open('$WORK/smart2.out.0'))['data_cache']
print(len(c['slabs']), c['window']['cache_num'], c['window']['replace_num'], len(c['window']['epochs']), c['hits'] + c['misses'])"
expect_out "3 120 30 2 360"
expect_eq "$(ls /dev/shm | grep -c "^${TRAINCACHE_SHM_PREFIX}gc-train-")" "0" "window slabs after the runs"
# 40 rows over 3 ranks: shares of 13, 13 and 14.
launch 3 raw3 "${RAW[@]}" --out "$WORK/raw3.pt" --json
expect_ranks_ok 3 raw3
same_params "$WORK/raw1.pt" "$WORK/raw3.pt" "$D/tower.pt"
py "
import json
j = json.load(open('$WORK/raw3.out.0'))
print(j['world_size'], j['steps'], abs(j['loss'] - $loss1) <= 1e-5 * abs($loss1))
"
expect_out "3 4 True"
# Collectives per run: a broadcast of the weights and a check of the start step, then three per
# step (representations gathered, their gradients summed, parameter gradients summed), whatever
# the chunk size: 2 + 3 x 4 = 14.
launch 2 chunks "${RAW[@]}" --chunk-size 2 --json --progress always
expect_ranks_ok 2 chunks
# Progress bars and messages are rank 0's alone.
expect_eq "$(grep -c 'training' "$WORK/chunks.err.0")" 1 "rank 0 draws the progress bar"
expect_eq "$(cat "$WORK/chunks.err.1")" "" "rank 1 stays quiet"
py "
import json
print([json.load(open(f))['collectives'] for f in ('$WORK/raw2.out.0', '$WORK/raw3.out.0', '$WORK/chunks.out.0')])
"
expect_out "[14, 14, 14]"
expect_eq "$(cat "$WORK/raw3.err.0")" "gc-train: rank 0 of 3 (gloo); every rank encodes 1/3 of each batch of 40" "rank 0 log"
expect_eq "$(cat "$WORK/raw3.err.1")" "" "rank 1 log"

# Separate encoders, symmetric loss, cosine similarity, AdamW: 2 ranks.
SEP=(--data "$D/pairs.h5" --query q --passage p --query-encoder "$D/tower.pt" --passage-encoder "$D/tower_b.pt"
     --symmetric --batch-size 24 --chunk-size 5 --optimizer sgd --momentum 0.9 --lr 0.2 --steps 3 --threads 1 -q)
run "$TC_BIN/gc-train" "${SEP[@]}" --out "$WORK/sq1.pt" --passage-out "$WORK/sp1.pt"
expect_rc 0
launch 2 sep2 "${SEP[@]}" --out "$WORK/sq2.pt" --passage-out "$WORK/sp2.pt"
expect_ranks_ok 2 sep2
same_params "$WORK/sq1.pt" "$WORK/sq2.pt" "$D/tower.pt"
same_params "$WORK/sp1.pt" "$WORK/sp2.pt" "$D/tower_b.pt"

# The plain (--no-gradcache) step is data parallel too.
launch 2 full2 "${RAW[@]}" --no-gradcache --out "$WORK/full2.pt"
expect_ranks_ok 2 full2
same_params "$WORK/raw1.pt" "$WORK/full2.pt" "$D/tower.pt"


finish
