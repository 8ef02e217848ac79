#!/usr/bin/env bash
# gc-train on raw inputs: exactness against the full-batch step through the CLI, outputs,
# checkpoint/resume equality, SIGINT, and every bad-input error.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
COMMON=(--data "$D/pairs.h5" --query q64 --passage p64 --batch-size 40 --chunk-size 7 --dtype float64
        --optimizer sgd --lr 0.5 --similarity dot --temperature 0.5 --no-shuffle --threads 1 -q)

# Gradient caching through the whole tool gives the full-batch parameters (float64, 1e-12).
run "$TC_BIN/gc-train" "${COMMON[@]}" --encoder "$D/tower.pt" --negatives negs --steps 4 --out "$WORK/gc.pt"
expect_rc 0
run "$TC_BIN/gc-train" "${COMMON[@]}" --encoder "$D/tower.pt" --negatives negs --steps 4 --out "$WORK/full.pt" --no-gradcache
expect_rc 0
# torch.jit.load reads the output, with the parameter names of the original module.
py_later "True True True" "
import torch
a = dict(torch.jit.load('$WORK/gc.pt').named_parameters()); b = dict(torch.jit.load('$WORK/full.pt').named_parameters())
s = dict(torch.jit.load('$D/tower.pt').named_parameters())
print(sorted(a) == sorted(s), max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-12,
      max(float((a[k].double() - s[k].double()).abs().max()) for k in a) > 1e-3)
"

# Separate encoders, symmetric loss, JSON summary and held-out evaluation.
run "$TC_BIN/gc-train" --data "$D/pairs.h5" --query q --passage p --query-encoder "$D/tower.pt" \
  --passage-encoder "$D/tower_b.pt" --symmetric --batch-size 50 --chunk-size 8,13 --epochs 3 \
  --eval-rows 200: --out "$WORK/q.pt" --passage-out "$WORK/p.pt" --metrics "$WORK/m.jsonl" --json
expect_rc 0
expect_err ""
echo "$out" > "$WORK/sum.json"
py_later "gc-train/1 raw-separate 12 12 ['accuracy_at_1', 'accuracy_at_10', 'accuracy_at_5', 'excluded', 'map_at_100', 'mrr_at_10', 'ndcg_at_10', 'precision_at_1', 'precision_at_10', 'precision_at_5', 'queries', 'recall_at_1', 'recall_at_10', 'recall_at_5', 'rows'] 40 14 ['step', 'epoch', 'eval'] ['step', 'epoch', 'loss', 'lr', 'seconds', 'wait_seconds', 'samples_per_second'] 12 True" "
import json, torch
j = json.load(open('$WORK/sum.json'))
lines = [json.loads(l) for l in open('$WORK/m.jsonl')]
print(j['schema'], j['mode'], j['steps'], j['total_steps'], sorted(j['eval_after']), j['eval_after']['rows'],
      len(lines), list(lines[0]), list(lines[1]), lines[-1]['step'],
      j['eval_after']['mrr_at_10'] > j['eval_before']['mrr_at_10'])
torch.jit.load('$WORK/q.pt'); torch.jit.load('$WORK/p.pt')
"

# Checkpoint/resume: killed after a checkpoint, resumed, ends with the same parameters as an
# uninterrupted run (model, optimizer state, schedule, RNG and data position are restored).
RES=(--data "$D/pairs.h5" --query q --passage p --encoder "$D/tower_dropout.pt" --batch-size 30
     --chunk-size 7 --optimizer adamw --warmup-steps 3 --schedule cosine --threads 1)
run "$TC_BIN/gc-train" "${RES[@]}" --lr 0.01 --steps 300 --out "$WORK/straight.pt" -q
expect_rc 0
# Kill -9 after the checkpoint of step 20 exists (every 10 steps), then resume.
"$TC_BIN/gc-train" "${RES[@]}" --lr 0.01 --steps 300 --checkpoint-dir "$WORK/ck" --checkpoint-every 20 \
  --metrics "$WORK/ck.jsonl" -q 2>/dev/null &
pid=$!
for i in $(seq 1 1000); do
  [ "$(wc -l 2>/dev/null < "$WORK/ck.jsonl" || echo 0)" -ge 61 ] && break
  sleep 0.01
done
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
run "$TC_BIN/gc-train" "${RES[@]}" --lr 0.01 --steps 300 --checkpoint-dir "$WORK/ck" --checkpoint-every 20 \
  --resume --out "$WORK/resumed.pt"
expect_rc 0
expect_err_re "^gc-train: resuming at step [0-9]+ from $WORK/ck/checkpoint.pt"
resumed_at=$(printf '%s' "$err" | grep -o 'resuming at step [0-9]*' | grep -o '[0-9]*$')
[ -n "$resumed_at" ] && [ "$resumed_at" -ge 60 ] && [ "$resumed_at" -lt 300 ] && _ok || _fail "resume must start mid-run, at $resumed_at"
py_later "True" "
import torch
a = dict(torch.jit.load('$WORK/straight.pt').named_parameters()); b = dict(torch.jit.load('$WORK/resumed.pt').named_parameters())
print(all(torch.equal(a[k], b[k]) for k in a))
"

# SIGINT: a checkpoint is saved and the exit status is 130.
"$TC_BIN/gc-train" "${RES[@]}" --lr 0.01 --steps 100000 --checkpoint-dir "$WORK/int" --metrics "$WORK/int.jsonl" \
  2>"$WORK/int.err" &
pid=$!
for i in $(seq 1 3000); do  # until a few steps have run (not a fixed sleep: start-up time varies)
  [ "$(wc -l 2>/dev/null < "$WORK/int.jsonl" || echo 0)" -ge 5 ] && break
  sleep 0.01
done
kill -INT "$pid"
wait "$pid"
rc=$?
err=$(cat "$WORK/int.err")
expect_rc 130
expect_err_re "^gc-train: interrupted: stopping after this step \(a checkpoint is saved with --checkpoint-dir\); interrupt again to stop at once
gc-train: interrupted at step [0-9]+; checkpoint $WORK/int/checkpoint.pt \(rerun with --resume\)$"
expect_file "$WORK/int/checkpoint.pt"

# Bad input.
expect_fail() {
  local code=$1 msg=$2
  shift 2
  run "$TC_BIN/gc-train" "$@"
  expect_rc "$code"
  expect_err "$msg"
}
# An HDF5 file's datasets are opened and their rows compared before LibTorch is loaded: these two
# are refused the same way with no engines module to load (TRAINCACHE_ENGINES_MODULE naming nothing).
TRAINCACHE_ENGINES_MODULE=$WORK/none.so expect_fail 65 \
  "gc-train: error: $D/pairs.h5: rows mismatch: 'q' has 240 rows but 'p_short' has 200" \
  --data "$D/pairs.h5" --query q --passage p_short --encoder "$D/tower.pt"
expect_fail 65 "gc-train: error: $D/tower_bn.pt: has BatchNorm layers (norm.running_mean); gradient caching would update their running statistics twice: use LayerNorm/GroupNorm, or --no-gradcache" \
  --data "$D/pairs.h5" --query q --passage p --encoder "$D/tower_bn.pt"
expect_fail 64 "gc-train: error: --batch-size: 500 is larger than the 240 training rows (use a smaller batch or --no-drop-last)" \
  --data "$D/pairs.h5" --query q --passage p --encoder "$D/tower.pt" --batch-size 500
TRAINCACHE_ENGINES_MODULE=$WORK/none.so expect_fail 66 "gc-train: error: $WORK/none.h5: no such file or directory" \
  --data "$WORK/none.h5" --query q --passage p --encoder "$D/tower.pt"
no_cuda
expect_fail 69 "gc-train: error: --device $NO_CUDA: $NO_CUDA_WHY" \
  --data "$D/pairs.h5" --query q --passage p --encoder "$D/tower.pt" --device $NO_CUDA
expect_fail 65 "gc-train: error: loss: query and passage representations differ in width (8 vs 16)" \
  --data "$D/pairs.h5" --query q --passage negs --encoder "$D/tower.pt" --chunk-size 7 --batch-size 32
mkdir -p "$WORK/bad"
echo "not a checkpoint" > "$WORK/bad/checkpoint.pt"
expect_fail 65 "gc-train: error: $WORK/bad/checkpoint.pt: unreadable checkpoint (damaged, or written by an older gc-train)" \
  --data "$D/pairs.h5" --query q --passage p --encoder "$D/tower.pt" --checkpoint-dir "$WORK/bad" --resume
expect_fail 65 "gc-train: error: $WORK/ck/checkpoint.pt: checkpoint was written with other settings (changed: optimizer)" \
  "${RES[@]}" --lr 0.5 --steps 300 --checkpoint-dir "$WORK/ck" --resume
# A diverging run stops at the first non-finite loss and keeps the last good checkpoint.
run "$TC_BIN/gc-train" --data "$D/pairs.h5" --query q --passage p --encoder "$D/tower.pt" --batch-size 32 \
  --similarity dot --temperature 1 --optimizer sgd --lr 1e9 --steps 20 --checkpoint-dir "$WORK/nan" --checkpoint-every 1
expect_rc 65
expect_err_re "^gc-train: error: step [0-9]+: loss is NaN; no input of the batch holds NaN or infinity: training diverged \(lower --lr, or --clip-norm\); the last good checkpoint is kept in $WORK/nan/checkpoint.pt$"
# A chunk larger than the batch is allowed: one chunk.
run "$TC_BIN/gc-train" --data "$D/pairs.h5" --query q --passage p --encoder "$D/tower.pt" --batch-size 16 \
  --chunk-size 64 --steps 2 -q
expect_rc 0
finish
