#!/usr/bin/env bash
# gc-train on cached embeddings: grouped (labels) and aligned (two encoders) pairings, built-in head.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$D/cnn.pt" --encoder mlp="$D/mlp.pt" \
  --features cnn=images --features mlp=vec --labels labels --out "$WORK/c.h5" || _fail "cache-fill"
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder t="$D/tuple.pt" --encoder d="$D/dict.pt" \
  --features vec --output t=0 --output d=emb --out "$WORK/pairs.h5" || _fail "cache-fill pairs"

run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --head mlp:32,16 --batch-size 64 --chunk-size 16 \
  --epochs 3 --eval-rows 250: --out "$WORK/head.pt" --json --seed 3
expect_rc 0
echo "$out" > "$WORK/sum.json"
# The head is TorchScript with named parameters, and maps 32-wide embeddings to 16.
py "
import json, h5py, torch
j = json.load(open('$WORK/sum.json'))
h = torch.jit.load('$WORK/head.pt')
e = torch.from_numpy(h5py.File('$WORK/c.h5', 'r')['embeddings/cnn'][:4])
print(j['mode'], j['steps'], sorted(j['eval_before']), j['eval_before']['rows'],
      [n for n, _ in h.named_parameters()], tuple(h(e).shape))
"
expect_out "cached-grouped 9 ['excluded', 'map_at_r', 'precision_at_1', 'precision_at_10', 'precision_at_5', 'queries', 'r_precision', 'rows'] 50 ['weight0', 'bias0', 'weight1', 'bias1'] (4, 16)"

run "$TC_BIN/gc-train" --cache "$WORK/pairs.h5" --query-embeddings t --passage-embeddings d --head linear:8 \
  --batch-size 50 --chunk-size 16 --epochs 2 --eval-rows :50 --json
expect_rc 0
expect_out_re '"mode":"cached-aligned".*"eval_after":\{"rows":50,"queries":50,"excluded":0,"accuracy_at_1":[0-9.]+'

# A repeated option takes its last value (scripts append overrides).
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --steps 1 --steps 2 --json
expect_rc 0
expect_out_re '"steps":2,"total_steps":2,'

# --eval-data: a separate cache with the same encoder (here: rows 250.. of the same images).
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$D/cnn.pt" --features images --labels labels \
  --rows 250: --out "$WORK/eval.h5" || _fail "cache-fill eval"
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --head mlp:32,16 --batch-size 64 --chunk-size 16 \
  --epochs 1 --eval-data "$WORK/eval.h5" --json
expect_rc 0
expect_out_re '"eval_before":\{"rows":50,"queries":[0-9]+,"excluded":[0-9]+,"precision_at_1":[0-9.]+,.*\},"eval_after":\{"rows":50,'
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings mlp --epochs 1 --eval-data "$WORK/eval.h5"
expect_rc 65
expect_err "gc-train: error: $WORK/eval.h5: no encoder named 'mlp' in the cache (have: cnn)"

# Per-encoder --cache-device is applied (a CUDA device this machine lacks is refused).
no_cuda
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --cache-device cnn=$NO_CUDA --steps 1
expect_rc 69
expect_err "gc-train: error: --cache-device cnn=$NO_CUDA: $NO_CUDA_WHY"

# Errors specific to cached mode.
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --query-embeddings cnn --passage-embeddings mlp
expect_rc 65
expect_err "gc-train: error: $WORK/c.h5: embedding widths differ between sides (32 vs 8); one head cannot serve both"
run "$TC_BIN/gc-train" --cache "$WORK/pairs.h5" --embeddings t
expect_rc 65
expect_err "gc-train: error: $WORK/pairs.h5: grouped mode needs labels in the cache (cache-fill --labels)"
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings nope
expect_rc 65
expect_err "gc-train: error: $WORK/c.h5: no encoder named 'nope' in the cache (have: cnn, mlp)"
# Options that were taken in silence (issue 84, messages): a seed past uint64 saturated (two such
# seeds were one), --max-tokens capped nothing on cached embeddings, an empty --eval-rows was
# reported as --rows.
for bad in "--seed|99999999999999999999999|--seed: must be an integer from 0 to 18446744073709551615, got '99999999999999999999999' (see --help)" \
           "--max-tokens|100|--max-tokens: caps the chunks of text sides (--data); cached embeddings (--cache) have none" \
           "--eval-rows|0:0|--eval-rows: empty range '0:0'"; do
  IFS='|' read -r flag value message <<<"$bad"
  run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --head linear:4 --batch-size 32 --steps 1 "$flag" "$value"
  expect_rc 64
  expect_err "gc-train: error: $message"
done
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --head conv:3
expect_rc 64
expect_err "gc-train: error: --head: expected mlp:H1,...,Hn, linear:D or a TorchScript file, got 'conv:3'"
run "$TC_BIN/gc-train" --cache "$D/foreign.h5" --embeddings cnn
expect_rc 65
expect_err "gc-train: error: $D/foreign.h5: not a traincache cache (no format=\"traincache\" attribute)"
# ---- a run killed after a checkpoint resumes without writing its log lines twice (issue 43, item 6):
# the lines past the checkpoint's step are cut, and the resumed run writes them again.
KT=(--cache "$WORK/c.h5" --embeddings cnn --head linear:8 --batch-size 32 --threads 1 --lr 0.01
    --checkpoint-dir "$WORK/kck" --checkpoint-every 5 --metrics "$WORK/k.jsonl" --batch-log "$WORK/kb.jsonl" -q)
"$TC_BIN/gc-train" "${KT[@]}" --steps 1000000 > /dev/null 2>&1 &
pid=$!
for _ in $(seq 600); do [ "$({ wc -l <"$WORK/k.jsonl"; } 2>/dev/null || echo 0)" -ge 23 ] && break; sleep 0.05; done
kill -KILL $pid
wait $pid 2>/dev/null
total=$(($(wc -l <"$WORK/k.jsonl") + 6))
run "$TC_BIN/gc-train" "${KT[@]}" --steps $total --resume
expect_rc 0
py "
import json
for name in ('k.jsonl', 'kb.jsonl'):
    steps = [json.loads(l)['step'] for l in open('$WORK/' + name)]
    print(name, steps == list(range(1, $total + 1)) or steps[-12:])
"
expect_out "k.jsonl True
kb.jsonl True"
# Resumed at the last step, nothing is trained: said so, not "0 samples/s" (issue 84, messages).
run "$TC_BIN/gc-train" "${KT[@]/-q/-v}" --steps $total --resume
expect_rc 0
expect_err_has "gc-train: cached-grouped: nothing left to do: the checkpoint is at step $total, the last"
[[ "$err" != *"samples/s"* ]] && _ok || _fail "a resume with nothing to train reports no rate"
finish
