#!/usr/bin/env bash
# gc-train's evaluation: --eval-split and --stratify, the warning about an unlike evaluation set,
# the evaluators (--eval-k) checked against an independent numpy computation on the trained head's
# embeddings, --eval-bootstrap intervals and the per-query --eval-dump.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
"$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$D/cnn.pt" --features images --labels labels \
  --out "$WORK/c.h5" || _fail "cache-fill"
# Pairs: the same image through two differently initialised CNNs, a retrieval task of middling ease.
"$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder a="$D/cnn.pt" --encoder b="$D/cnn_other.pt" \
  --features images --out "$WORK/pairs.h5" || _fail "cache-fill pairs"

# numpy's metrics of the --out head on the dump's rows, against gc-train's eval_after and the dump.
check() {  # check SUMMARY.json HEAD.pt DUMP.tsv MODE KS
  py "
import json, h5py, numpy as np, torch
j = json.load(open('$1'))['eval_after']
h = torch.jit.load('$2').eval()
dump = np.genfromtxt('$3', delimiter='\t', names=True)
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
"
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
print(sorted(set(d['step'].astype(int))), j['eval_after']['rows'] == sum(held.values()),
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
check "$WORK/g.json" "$WORK/g.pt" "$WORK/g.tsv" grouped 1,3
expect_out_re "^ok [0-9]+ 4$"

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
check "$WORK/p.json" "$WORK/p.pt" "$WORK/p.tsv" pairs 1,5
expect_out "ok 75 0"

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
gc-train: warning: the evaluation rows' label distribution differs from the training rows' (total variation distance 0.40 > 0.2)
gc-train: before training: no queries: each of the 3 rows is alone in its class"
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --steps 1 --eval-split 0.5 --stratify
expect_rc 0
[[ "$err" != *"warning"* ]] && _ok || _fail "a stratified split warned: $err"

# ---- bad options: one line, exit 64, before any training
bad() {  # bad MESSAGE ARGS...
  local msg=$1
  shift
  run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --steps 1 "$@"
  expect_rc 64
  expect_err "gc-train: error: $msg"
}
bad "--eval-split: give --eval-split or --eval-rows, not both" --eval-split 0.2 --eval-rows 0:10
bad "--stratify: applies to --eval-split" --stratify --eval-rows 0:10
bad "--eval-k: '0' is not a positive integer (give a list such as 1,5,10)" --eval-split 0.2 --eval-k 1,0
bad "--eval-k: lists a cut-off twice" --eval-split 0.2 --eval-k 5,5
bad "--eval-dump: needs an evaluation set (--eval-rows, --eval-split or --eval-data)" --eval-dump "$WORK/x.tsv"
bad "--eval-bootstrap: needs an evaluation set (--eval-rows, --eval-split or --eval-data)" --eval-bootstrap 100
bad "--eval-split: must be a fraction of the rows, above 0 and below 1" --eval-split 1.5
run "$TC_BIN/gc-train" --cache "$WORK/pairs.h5" --query-embeddings a --passage-embeddings b --steps 1 \
  --eval-split 0.2 --stratify
expect_rc 64
expect_err "gc-train: error: --stratify: needs labels: grouped mode (--cache with --embeddings)"
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --steps 1 --eval-split 0.2 \
  --eval-dump "$WORK/no/such/dir/d.tsv" -o "$WORK/never.pt"
expect_rc 73
expect_err_re "^gc-train: error: $WORK/no/such/dir/d.tsv: cannot create"
expect_no_file "$WORK/never.pt"

finish
