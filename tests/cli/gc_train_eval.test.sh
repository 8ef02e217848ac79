#!/usr/bin/env bash
# gc-train's evaluation: --eval-split and --stratify, the warning about an unlike evaluation set,
# the evaluators (--eval-k) checked against an independent numpy computation on the trained head's
# embeddings, --eval-bootstrap intervals and the per-query --eval-dump.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$D/cnn.pt" --features images --labels labels \
  --out "$WORK/c.h5" || _fail "cache-fill"
# Pairs: the same image through two differently initialised CNNs, a retrieval task of middling ease.
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder a="$D/cnn.pt" --encoder b="$D/cnn_other.pt" \
  --features images --out "$WORK/pairs.h5" || _fail "cache-fill pairs"

# numpy's metrics of the --out head on the dump's rows, against gc-train's eval_after and the dump.
check() {  # check WANT [re] SUMMARY.json HEAD.pt DUMP.tsv MODE KS: at finish (py_later), on copies
  CHECK_N=$((${CHECK_N:-0} + 1))
  local want=$1 mode=$2 dir="$WORK/check.$CHECK_N"
  shift 2
  mkdir "$dir" && cp "$1" "$dir/summary.json" && cp "$2" "$dir/head.pt" && cp "$3" "$dir/dump.tsv" ||
    _fail "check: cannot copy $1, $2 or $3"
  py_later "$want" "
import json, h5py, numpy as np, torch
j = json.load(open('$dir/summary.json'))['eval_after']
h = torch.jit.load('$dir/head.pt').eval()
dump = np.genfromtxt('$dir/dump.tsv', delimiter='\t', names=True)
last = dump[dump['step'] == dump['step'].max()]
rows = last['row'].astype(int)
ks = [int(k) for k in '$5'.split(',')]
f = h5py.File('$WORK/c.h5' if '$4' == 'grouped' else '$WORK/pairs.h5', 'r')
def emb(name, r):
    with torch.no_grad():
        x = h(torch.from_numpy(f['embeddings/' + name][:][np.sort(r)]))
    return torch.nn.functional.normalize(x, dim=1).double().numpy()
want = {}
if '$4' == 'grouped':
    # every evaluation row is a candidate, also the ones left out as queries (lone labels)
    ev = np.array(sorted(set(json.load(open('$WORK/evalrows.json')))))
    e = emb('cnn', ev)
    lab = f['labels'][:][ev]
    s = e @ e.T
    np.fill_diagonal(s, -np.inf)
    per = {k: [] for k in ['precision_at_%d' % k for k in ks] + ['r_precision', 'map_at_r', 'rank']}
    qrows = []
    for i in range(len(ev)):
        rel = lab == lab[i]
        rel[i] = False
        R = rel.sum()
        if R == 0:
            continue
        qrows.append(ev[i])
        order = np.argsort(-s[i], kind='stable')[:len(ev) - 1]
        hit = rel[order].astype(float)
        for k in ks:
            per['precision_at_%d' % k].append(hit[:k].sum() / k)
        per['r_precision'].append(hit[:R].sum() / R)
        prec = np.cumsum(hit) / np.arange(1, len(hit) + 1)
        per['map_at_r'].append((prec[:R] * hit[:R]).sum() / R)
        per['rank'].append(np.argmax(hit) + 1)
    assert list(rows) == qrows, (list(rows)[:5], qrows[:5])
else:
    q, p = emb('a', rows), emb('b', rows)
    s = q @ p.T
    rank = (s > np.diag(s)[:, None]).sum(1)
    per = {'rank': rank + 1}
    for k in ks:
        per['accuracy_at_%d' % k] = (rank < k).astype(float)
        per['precision_at_%d' % k] = (rank < k) / k
        per['recall_at_%d' % k] = (rank < k).astype(float)
    per['mrr_at_10'] = np.where(rank < 10, 1 / (rank + 1), 0)
    per['ndcg_at_10'] = np.where(rank < 10, 1 / np.log2(rank + 2), 0)
    per['map_at_100'] = np.where(rank < 100, 1 / (rank + 1), 0)
bad = []
for k, v in per.items():
    v = np.asarray(v, float)
    if not np.allclose(last[k], v, rtol=0, atol=1e-9):
        bad.append('dump ' + k)
    if k != 'rank' and abs(j[k] - v.mean()) > 1e-9:
        bad.append('%s %r vs %r' % (k, j[k], v.mean()))
keys = sorted(k for k in j if k not in ('rows', 'queries', 'excluded', 'ci95'))
if keys != sorted(k for k in per if k != 'rank'):
    bad.append('keys %s' % keys)
for k, (lo, hi) in j.get('ci95', {}).items():
    if not lo <= j[k] <= hi or hi - lo <= 0:
        bad.append('ci95 %s' % k)
print('ok %d %d' % (j['queries'], len(j.get('ci95', {}))) if not bad else bad)
" "$mode"
}

# ---- grouped (labels): a stratified 30% split, precision@1,3, R-precision, MAP@R
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --head mlp:32,16 --batch-size 64 --chunk-size 16 \
  --steps 3 --eval-split 0.3 --stratify --eval-k 3,1 --eval-bootstrap 300 --eval-dump "$WORK/g.tsv" \
  --out "$WORK/g.pt" --json --seed 5
expect_rc 0
echo "$out" >"$WORK/g.json"
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --head mlp:32,16 --batch-size 64 --chunk-size 16 \
  --steps 3 --eval-split 0.3 --stratify --eval-k 3,1 --eval-bootstrap 300 --seed 5
expect_err_re "after training:  precision@1 [0-9.]+ \[[0-9.]+, [0-9.]+\], precision@3 [0-9.]+ \[[0-9.]+, [0-9.]+\], R-precision [0-9.]+ \[[0-9.]+, [0-9.]+\], MAP@R [0-9.]+ \[[0-9.]+, [0-9.]+\] \([0-9]+ queries\)"
# The held-out rows: every class gives round(0.3 n) of its n rows.
py "
import h5py, json, numpy as np
lab = h5py.File('$WORK/c.h5', 'r')['labels'][:]
d = np.genfromtxt('$WORK/g.tsv', delimiter='\t', names=True)
j = json.load(open('$WORK/g.json'))
# the dump holds the queries; rows alone in their class are candidates only, so count from labels
held = {}
for c in np.unique(lab):
    n = (lab == c).sum()
    held[int(c)] = int(min(max(np.floor(0.3 * n + 0.5), 1), n - 1)) if n >= 2 else 0
print(sorted({int(s) for s in d['step']}), j['eval_after']['rows'] == sum(held.values()),
      j['eval_after']['queries'] + j['eval_after']['excluded'] == j['eval_after']['rows'])
"
expect_out "[0, 3] True True"
# Which rows were held out: the dump's rows and, in grouped mode, only queries; recover the set
# from the dump (every class has >= 2 held-out rows here, so no row is left out as a query).
py "
import json, numpy as np
d = np.genfromtxt('$WORK/g.tsv', delimiter='\t', names=True)
j = json.load(open('$WORK/g.json'))['eval_after']
assert j['excluded'] == 0, j
json.dump(sorted(set(d['row'].astype(int).tolist())), open('$WORK/evalrows.json', 'w'))
print(len(set(d['row'].astype(int).tolist())) == j['rows'])
"
expect_out "True"
check "^ok [0-9]+ 4$" re "$WORK/g.json" "$WORK/g.pt" "$WORK/g.tsv" grouped 1,3

# ---- pairs (two encoders' embeddings): a 25% split, accuracy/precision/recall@1,5, MRR@10,
# NDCG@10, MAP@100
run "$TC_BIN/gc-train" --cache "$WORK/pairs.h5" --query-embeddings a --passage-embeddings b --head linear:8 \
  --batch-size 50 --chunk-size 16 --steps 2 --eval-split 0.25 --eval-k 1,5 --eval-dump "$WORK/p.tsv" \
  --out "$WORK/p.pt" --json --seed 2
expect_rc 0
echo "$out" >"$WORK/p.json"
run "$TC_BIN/gc-train" --cache "$WORK/pairs.h5" --query-embeddings a --passage-embeddings b --head linear:8 \
  --batch-size 50 --chunk-size 16 --steps 2 --eval-split 0.25 --eval-k 1,5 --seed 2
expect_err_re "before training: accuracy@1 [0-9.]+, accuracy@5 [0-9.]+, precision@1 [0-9.]+, precision@5 [0-9.]+, recall@1 [0-9.]+, recall@5 [0-9.]+, MRR@10 [0-9.]+, NDCG@10 [0-9.]+, MAP@100 [0-9.]+ \(75 queries\)"
check "ok 75 0" "" "$WORK/p.json" "$WORK/p.pt" "$WORK/p.tsv" pairs 1,5

# The same seed gives the same split and intervals; the dump is replaced, not appended to.
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --head mlp:32,16 --batch-size 64 --chunk-size 16 \
  --steps 3 --eval-split 0.3 --stratify --eval-k 3,1 --eval-bootstrap 300 --eval-dump "$WORK/g.tsv" --json --seed 5
expect_rc 0
py "
import json
a, b = json.load(open('$WORK/g.json')), json.loads('''$out''')
print(a['eval_before'] == b['eval_before'], sum(1 for _ in open('$WORK/g.tsv')) == 1 + 2 * a['eval_after']['queries'])
"
expect_out "True True"

# ---- an evaluation set unlike the training set is named: the last 3 rows hold classes 2, 3, 4
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --steps 1 --eval-rows 297:
expect_rc 0
expect_err_has "gc-train: warning: the evaluation rows lack 2 of the 5 classes of the training rows (0, 1); --eval-split F --stratify holds out every class
gc-train: before training: no queries: each of the 3 rows is alone in its class"
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --steps 1 --eval-split 0.5 --stratify
expect_rc 0
[[ "$err" != *"warning"* ]] && _ok || _fail "a stratified split warned: $err"

# ---- NaN in a cache (cache-fill never stores it; a damaged or foreign file): an evaluation row's is
# refused, not ranked; a training row's loss names the row (issue 84, item 15) -------------------
cp "$WORK/c.h5" "$WORK/nan.h5"
py "
import h5py, numpy as np
with h5py.File('$WORK/nan.h5', 'r+') as f:
    f['embeddings/cnn'][3, 0] = np.nan
    f['embeddings/cnn'][250, 7] = np.inf
print('ok')"
run "$TC_BIN/gc-train" --cache "$WORK/nan.h5" --embeddings cnn --steps 1 --eval-rows 0:100
expect_rc 65
expect_err "gc-train: error: evaluation row 3: its query representation is not finite (1 evaluation row(s) are): its input holds NaN or infinity (cache-fill never stores such rows: a damaged or foreign file?)"
run "$TC_BIN/gc-train" --cache "$WORK/nan.h5" --embeddings cnn --steps 1 --batch-size 200 --eval-rows 100:200
expect_rc 65
expect_err_has "gc-train: error: step 0: loss is NaN; the inputs of data row(s) 3, 250 (2 in the batch) hold NaN or infinity (cache-fill never stores such rows: a damaged or foreign file?)"
# A row alone in its batch trains nothing with supcon (or triplet, or infonce without hard negatives).
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --steps 1 --batch-size 1
expect_rc 64
expect_err "gc-train: error: --batch-size: 1: supcon contrasts the rows of a batch, and a row alone trains nothing; use 2 or more"
run "$TC_BIN/gc-train" --cache "$WORK/pairs.h5" --query-embeddings a --passage-embeddings b --steps 1 --batch-size 1
expect_rc 64
expect_err "gc-train: error: --batch-size: 1: infonce contrasts the rows of a batch (or a row's hard negatives, --negatives), and a row alone trains nothing; use 2 or more"
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --steps 1 --batch-size 1 --loss softmax -q
expect_rc 0

# ---- during training: --eval-every, --select-best, --early-stop, and a resume that keeps the record.
# With this seed and rate, mrr_at_10 at steps 0, 3, 6, 9, 12 peaks at step 6.
SEL=(--cache "$WORK/pairs.h5" --query-embeddings a --passage-embeddings b --head linear:16 --batch-size 32
     --eval-split 0.3 --lr 0.03 --seed 1)
run "$TC_BIN/gc-train" "${SEL[@]}" --steps 12 --eval-every 3 --select-best mrr_at_10 --out "$WORK/best.pt" \
  --metrics "$WORK/m.jsonl" --json
expect_rc 0
echo "$out" >"$WORK/sel.json"
py "
import json
j = json.load(open('$WORK/sel.json'))
ev = [(l['step'], l['eval']['mrr_at_10']) for l in map(json.loads, open('$WORK/m.jsonl')) if 'eval' in l]
top = max(ev, key=lambda e: e[1])  # the first of equal values, as a new best must be strictly better
print([s for s, _ in ev], j['best']['step'] == top[0] and j['best']['value'] == top[1], j['best']['step'],
      j['eval_after']['mrr_at_10'] == ev[-1][1], j['stopped_early'])
"
expect_out "[0, 3, 6, 9, 12] True 6 True False"
# --out holds the step-6 parameters: those of a plain 6-step run, and not those of step 12.
run "$TC_BIN/gc-train" "${SEL[@]}" --steps 6 --out "$WORK/six.pt"
expect_rc 0
same_params "$WORK/best.pt" "$WORK/six.pt" "" 0
run "$TC_BIN/gc-train" "${SEL[@]}" --steps 12 --out "$WORK/twelve.pt"
expect_rc 0
py_later "True" "
import torch
a = dict(torch.jit.load('$WORK/best.pt').named_parameters())
b = dict(torch.jit.load('$WORK/twelve.pt').named_parameters())
print(max(float((a[k] - b[k]).abs().max()) for k in a) > 1e-4)"

# Resume keeps the record: 6 steps, then resumed to 12, ends with the uninterrupted run's best and --out.
run "$TC_BIN/gc-train" "${SEL[@]}" --steps 6 --eval-every 3 --select-best mrr_at_10 --out "$WORK/res.pt" \
  --checkpoint-dir "$WORK/ck" -q
expect_rc 0
expect_file "$WORK/ck/best.pt"
run "$TC_BIN/gc-train" "${SEL[@]}" --steps 12 --eval-every 3 --select-best mrr_at_10 --out "$WORK/res.pt" \
  --checkpoint-dir "$WORK/ck" --resume --json
expect_rc 0
echo "$out" >"$WORK/res.json"
py "
import json
a, b = json.load(open('$WORK/sel.json')), json.load(open('$WORK/res.json'))
print(b['start_step'], a['best'] == b['best'])"
expect_out "6 True"
same_params "$WORK/best.pt" "$WORK/res.pt" "" 0
# Selecting by another metric is another setting: the record would mean nothing.
run "$TC_BIN/gc-train" "${SEL[@]}" --steps 12 --eval-every 3 --select-best ndcg_at_10 --checkpoint-dir "$WORK/ck" \
  --resume
expect_rc 65
expect_err_has "checkpoint was written with other settings (changed: select_best)"

# --early-stop 2: the evaluations at 9 and 12 do not beat step 6's, so a 15-step run ends after step 12.
run "$TC_BIN/gc-train" "${SEL[@]}" --steps 15 --eval-every 3 --select-best mrr_at_10 --early-stop 2 \
  --out "$WORK/early.pt" --checkpoint-dir "$WORK/ck2" --json
expect_rc 0
expect_out_re '"steps":12,"total_steps":15,.*"best":\{"metric":"mrr_at_10","value":[0-9.]+,"step":6\},"stopped_early":true'
same_params "$WORK/best.pt" "$WORK/early.pt" "" 0
run "$TC_BIN/gc-train" "${SEL[@]}" --steps 15 --eval-every 3 --select-best mrr_at_10 --early-stop 2 \
  --out "$WORK/early.pt"
expect_err_re "gc-train: step 6: accuracy@1 [0-9.]+, .* \(90 queries\) \(best so far\)
gc-train: step 9: accuracy@1 [^(]*\(90 queries\)
gc-train: step 12: "

# ---- bad options: one line, exit 64, before any training, and before LibTorch is loaded: with no
# engines module to load (TRAINCACHE_ENGINES_MODULE naming nothing) they are refused the same way
bad() {  # bad MESSAGE ARGS...
  local msg=$1
  shift
  TRAINCACHE_ENGINES_MODULE=$WORK/none.so run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --steps 1 "$@"
  expect_rc 64
  expect_err "gc-train: error: $msg"
}
# Each rule's message is checked in unit.train_plan_test and unit.eval_stats_test (split_rows,
# validate_options, validate_selection, parse_ks); here, one of each kind through the tool.
bad "--eval-split: give --eval-split or --eval-rows, not both" --eval-split 0.2 --eval-rows 0:10
bad "--eval-k: lists a cut-off twice" --eval-split 0.2 --eval-k 5,5
bad "--early-stop: needs --eval-every N (evaluations during training)" --eval-split 0.2 --select-best map_at_r \
  --early-stop 2
bad "--select-best: 'mrr_at_10' is not a metric of this mode (precision_at_1, precision_at_5, precision_at_10, r_precision, map_at_r)" \
  --eval-split 0.2 --select-best mrr_at_10
TRAINCACHE_ENGINES_MODULE=$WORK/none.so run "$TC_BIN/gc-train" --cache "$WORK/pairs.h5" --query-embeddings a \
  --passage-embeddings b --steps 1 --eval-split 0.2 --stratify
expect_rc 64
expect_err "gc-train: error: --stratify: needs labels: grouped mode (--cache with --embeddings)"
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --steps 1 --eval-split 0.2 \
  --eval-dump "$WORK/no/such/dir/d.tsv" -o "$WORK/never.pt"
expect_rc 73
expect_err_re "^gc-train: error: $WORK/no/such/dir/d.tsv: cannot create"
expect_no_file "$WORK/never.pt"

finish
