#!/usr/bin/env bash
# Data-parallel gc-train on cached embeddings over c10d/Gloo on loopback: 3 ranks sharing one slab
# train like one process (supervised contrastive, arcface), --select-best and --early-stop decided
# by rank 0, short last batches skipped on every rank; the launcher's environment and option
# errors; torchrun --standalone and a static rendezvous.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/dist_lib.sh"

# ---- cached embeddings, grouped (supervised contrastive): 3 ranks sharing one slab
cached_job
run "$TC_BIN/gc-train" "${CACHED[@]}" --out "$WORK/h1.pt" --metrics "$WORK/h1.jsonl"
expect_rc 0
launch 3 h3 "${CACHED[@]}" --out "$WORK/h3.pt" --metrics "$WORK/h3.jsonl" --cache-shm dist
expect_ranks_ok 3 h3
same_params "$WORK/h1.pt" "$WORK/h3.pt"
# One slab for the three ranks; the metrics (rank 0's) show the same losses as one process.
"$TC_BIN/shm-cache" list --json >"$WORK/slabs.json"
py "
import json
print([(s['name'], s['counts']['filled'], s['length']) for s in json.load(open('$WORK/slabs.json'))['slabs']])
"
expect_out "[('dist-cnn', 300, 300)]"
py "
import json
a = [json.loads(l)['loss'] for l in open('$WORK/h1.jsonl')]
b = [json.loads(l)['loss'] for l in open('$WORK/h3.jsonl')]
print(len(a), len(b), max(abs(x - y) / abs(x) for x, y in zip(a, b)) <= 1e-5)
"
expect_out "6 6 True"
# A classifier objective (its class weights are parameters too): 2 ranks equal one process.
run "$TC_BIN/gc-train" "${CACHED[@]}" --loss arcface --scale 16 --out "$WORK/a1.pt" --classifier-out "$WORK/a1c.pt"
expect_rc 0
launch 2 a2 "${CACHED[@]}" --loss arcface --scale 16 --out "$WORK/a2.pt" --classifier-out "$WORK/a2c.pt"
expect_ranks_ok 2 a2
same_params "$WORK/a1.pt" "$WORK/a2.pt"
same_params "$WORK/a1c.pt" "$WORK/a2c.pt"
# --select-best and --early-stop: rank 0 evaluates and decides for all ranks. (Not compared with
# one process: metrics that differ in the 5th digit, from summation order, can flip a decision.)
# The run stops 2 evaluations after its best, or runs to the end; --out holds the parameters of
# the best step (as a 2-rank run of exactly that many steps writes them); DIR/best.pt exists.
SEL=("${CACHED[@]}" --steps 12 --eval-split 0.3 --stratify --eval-every 2 --select-best map_at_r --early-stop 2)
launch 2 s2 "${SEL[@]}" --out "$WORK/s2.pt" --checkpoint-dir "$WORK/s2" --json
expect_ranks_ok 2 s2
best=$("$TC_PYTHON" -c "import json; j = json.load(open('$WORK/s2.out.0')); print(j['best']['step'])")
py "
import json
j = json.load(open('$WORK/s2.out.0'))
b, t = j['best']['step'], j['steps']
print('ok' if (t == b + 4 if j['stopped_early'] else t == 12) and b % 2 == 0 else (b, t, j['stopped_early']))
"
expect_out "ok"
expect_eq "$((best > 0))" 1 "a step after 0 is the best (here step 2)"
launch 2 s3 "${CACHED[@]}" --steps "$best" --eval-split 0.3 --stratify --out "$WORK/s3.pt"
expect_ranks_ok 2 s3
same_params "$WORK/s3.pt" "$WORK/s2.pt"
expect_file "$WORK/s2/best.pt"

# A last partial batch with fewer rows than ranks (--no-drop-last) is skipped on every rank.
# (CACHED without its --steps 6: this run counts epochs; --steps 0 is a usage error)
launch 2 tail "${CACHED[@]:0:10}" "${CACHED[@]:12}" --batch-size 299 --no-drop-last --epochs 2 --json
expect_ranks_ok 2 tail
expect_eq "$(grep -c 'skipped' "$WORK/tail.err.0")" 2 "skipped steps"
expect_eq "$(sed -n 2p "$WORK/tail.err.0")" "gc-train: step 2: skipped: its batch has 1 row(s), fewer than the 2 ranks"
py "
import json
j = json.load(open('$WORK/tail.out.0'))
print(j['steps'], j['collectives'])
"
expect_out "4 8"
# The same with --stream: the prefetched batches stay in step with the skipped ones.
launch 2 tails "${CACHED[@]:0:10}" "${CACHED[@]:12}" --batch-size 299 --no-drop-last --epochs 2 --stream \
  --out "$WORK/tails.pt"
expect_ranks_ok 2 tails
expect_eq "$(grep -c 'skipped' "$WORK/tails.err.0")" 2 "skipped steps (--stream)"

# ---- launcher environment and option errors (before any connection is tried)
run env RANK=2 WORLD_SIZE=2 "$TC_BIN/gc-train" "${CACHED[@]}"
expect_rc 64
expect_err "gc-train: error: RANK: 2 is not below WORLD_SIZE 2"
run env WORLD_SIZE=two "$TC_BIN/gc-train" "${CACHED[@]}"
expect_rc 64
expect_err "gc-train: error: WORLD_SIZE: expected an integer >= 1, got 'two'"
run env -u RANK WORLD_SIZE=2 "$TC_BIN/gc-train" "${CACHED[@]}"
expect_rc 64
expect_err "gc-train: error: WORLD_SIZE: is set but RANK is not"
run env RANK=0 WORLD_SIZE=2 "$TC_BIN/gc-train" "${CACHED[@]}" --dist-backend nccl
expect_rc 69
expect_err "gc-train: error: --dist-backend: this LibTorch has no NCCL (build against a CUDA LibTorch, or use --dist-backend gloo)"
run "$TC_BIN/gc-train" "${CACHED[@]}" --dist-timeout 0
expect_rc 64
expect_err "gc-train: error: --dist-timeout: must be a positive number, got '0' (see --help)"
run "$TC_BIN/gc-train" "${CACHED[@]}" --threads -1
expect_rc 64
expect_err "gc-train: error: --threads: must be an integer from 0 to 256, got '-1' (see --help)"
run env RANK=0 WORLD_SIZE=3 "$TC_BIN/gc-train" "${CACHED[@]}" --batch-size 2
expect_rc 64
expect_err "gc-train: error: --batch-size: 2 rows cannot be shared by 3 ranks"

# ---- torchrun: --standalone (rank 0 hosts the store) and a static rendezvous (torchrun's agent does)
TORCHRUN=$(dirname "$TC_PYTHON")/torchrun
why=$(torchrun_unusable)
if [ -n "$why" ]; then
  echo "note: the torchrun launches are not checked here: $why"
elif [ -x "$TORCHRUN" ]; then
  export PATH="$TC_BIN:$PATH"
  run timeout 120 "$TORCHRUN" --standalone --nproc_per_node 2 --redirects 2 --tee 2 --log_dir "$WORK/tr1" \
    --no_python gc-train "${CACHED[@]}" --out "$WORK/tr1.pt" --json
  expect_rc 0
  expect_out_re '^\{"schema":"gc-train/1","status":"done","mode":"cached-grouped","objective":"supcon","classes":0,"world_size":2,'
  same_params "$WORK/h1.pt" "$WORK/tr1.pt"
  run timeout 120 "$TORCHRUN" --nnodes 1 --node_rank 0 --nproc_per_node 3 --master_addr 127.0.0.1 \
    --master_port "$(free_port)" --redirects 2 --tee 2 --log_dir "$WORK/tr2" \
    --no_python gc-train "${CACHED[@]}" --out "$WORK/tr2.pt" --json
  expect_rc 0
  expect_out_re '"world_size":3,'
  same_params "$WORK/h1.pt" "$WORK/tr2.pt"
else
  _fail "torchrun is missing (python3-torch)"
fi

finish
