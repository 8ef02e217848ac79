#!/usr/bin/env bash
# gc-train's objectives over labelled rows: --loss softmax|arcface|cosface|triplet (--mining), the
# loss of the first step checked against numpy on the saved head and classifier, the classifier's
# top-k accuracy against numpy, raw grouped mode (--labels), resume, and the option errors.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$D/cnn.pt" --features images --labels labels \
  --out "$WORK/c.h5" || _fail "cache-fill"
C=(--cache "$WORK/c.h5" --embeddings cnn --head linear:8)

# One full batch of the 200 training rows in order, with a learning rate too small to move float32
# parameters: step 1's loss is the loss of the modules --out and --classifier-out save.
probe() {  # probe NAME ARGS...
  local name=$1
  shift
  run "$TC_BIN/gc-train" -q "${C[@]}" --optimizer sgd --lr 1e-30 --no-shuffle -b 200 --steps 1 \
    --eval-rows 200: --eval-k 1,2 --metrics "$WORK/$name.jsonl" --out "$WORK/$name-head.pt" --json "$@"
  expect_rc 0
  cp "$WORK/.out" "$WORK/$name.json"
}

# numpy's loss and top-k accuracy from the saved modules, against gc-train's: each case recorded by
# check_loss NAME LOSS MARGIN SCALE MINING, all checked by check_losses in one Python process
# (importing torch costs about 2 s a start); one line each, NAME ok or what differs.
LOSS_CASES=()
check_loss() { LOSS_CASES+=("$1:$2:$3:$4:$5"); }
check_losses() {
  local want=()
  for c in "${LOSS_CASES[@]}"; do want+=("${c%%:*} ok"); done
  py "
import json, h5py, numpy as np, torch
def check(name, loss, m, s, mining):
    steps = [json.loads(l) for l in open('$WORK/%s.jsonl' % name)]
    got = [s['loss'] for s in steps if 'loss' in s][0]
    summary = json.load(open('$WORK/%s.json' % name))
    f = h5py.File('$WORK/c.h5', 'r')
    x = torch.from_numpy(f['embeddings/cnn'][:])
    lab = f['labels'][:].astype(int)
    with torch.no_grad():
        z = torch.jit.load('$WORK/%s-head.pt' % name)(x).double().numpy()
    tr, ev = np.arange(200), np.arange(200, 300)
    classes = np.unique(lab[tr])
    y = np.searchsorted(classes, lab)
    m, s = float(m), float(s)
    def unit(a):
        return a / np.linalg.norm(a, axis=1, keepdims=True)
    def ce(logits, t):
        mx = logits.max(1, keepdims=True)
        return np.mean(np.log(np.exp(logits - mx).sum(1)) + mx[:, 0] - logits[np.arange(len(t)), t])
    bad = []
    if loss in ('softmax', 'arcface', 'cosface'):
        c = torch.jit.load('$WORK/%s-cls.pt' % name)
        W = c.weight.detach().double().numpy()
        if list(c.labels.numpy()) != list(classes):
            bad.append('labels buffer %s' % c.labels)
        if loss == 'softmax':
            b = c.bias.detach().double().numpy()
            logits = z[tr] @ W.T + b
            pred = z[ev] @ W.T + b
        else:
            cos = unit(z[tr]) @ unit(W).T
            ct = cos[tr, y[tr]]
            if loss == 'cosface':
                phi = ct - m
            else:
                th = np.arccos(np.clip(ct, -1, 1))
                phi = np.where(th + m < np.pi, np.cos(th + m), ct - m * np.sin(m))
            cos[tr, y[tr]] = phi
            logits = s * cos
            pred = s * (unit(z[ev]) @ unit(W).T)
        want = ce(logits, y[tr])
        with torch.no_grad():
            scripted = c(torch.from_numpy(z[ev]).float()).double().numpy()
        if not np.allclose(scripted, pred, rtol=1e-4, atol=1e-4):
            bad.append('classifier forward')
        above = (pred > pred[np.arange(100), y[ev]][:, None]).sum(1)
        for k in (1, 2):
            acc = float(np.mean(above < k))
            if abs(summary['eval_after']['accuracy_at_%d' % k] - acc) > 1e-9:
                bad.append('accuracy_at_%d %r vs %r' % (k, summary['eval_after']['accuracy_at_%d' % k], acc))
    else:
        e = unit(z[tr])
        S = e @ e.T
        n = len(tr)
        same = lab[tr][:, None] == lab[tr][None, :]
        terms = []
        for a in range(n):
            pos = [p for p in range(n) if same[a, p] and p != a]
            neg = S[a][~same[a]]
            if mining == 'batch-hard':
                terms.append(max(0.0, neg.max() - min(S[a, p] for p in pos) + m))
            else:
                for p in pos:
                    below = neg[neg < S[a, p]]
                    terms.append(max(0.0, (below.max() if len(below) else neg.min()) - S[a, p] + m))
        want = float(np.mean(terms))
    if abs(got - want) > 1e-4 * max(1.0, abs(want)):
        bad.append('loss %r vs numpy %r' % (got, want))
    if summary['objective'] != loss:
        bad.append('objective %s' % summary['objective'])
    return bad
for case in '${LOSS_CASES[*]}'.split():
    name, loss, m, s, mining = case.split(':')
    bad = check(name, loss, m, s, mining)
    print(name, 'ok' if not bad else bad)
"
  expect_out "$(printf '%s\n' "${want[@]}")"
}

probe softmax --loss softmax --classifier-out "$WORK/softmax-cls.pt"
check_loss softmax softmax 0 0 -
expect_eq "$(grep -o '"classes":[0-9]*' "$WORK/softmax.json")" '"classes":5'
probe arcface --loss arcface --classifier-out "$WORK/arcface-cls.pt"
check_loss arcface arcface 0.5 64 -
probe arcface2 --loss arcface --margin 1.3 --scale 10 --classifier-out "$WORK/arcface2-cls.pt"
check_loss arcface2 arcface 1.3 10 -
probe cosface --loss cosface --margin 0.2 --scale 16 --classifier-out "$WORK/cosface-cls.pt"
check_loss cosface cosface 0.2 16 -
probe hard --loss triplet
check_loss hard triplet 0.2 0 batch-hard
probe semi --loss triplet --mining semi-hard --margin 0.5
check_loss semi triplet 0.5 0 semi-hard
check_losses

# The report: the classifier's metrics beside the embedding metrics, on stderr too.
run "$TC_BIN/gc-train" "${C[@]}" --loss softmax --epochs 2 -b 50 --eval-rows 200: --eval-k 1,3
expect_rc 0
expect_err_re "after training: +precision@1 [0-9.]+, precision@3 [0-9.]+, R-precision [0-9.]+, MAP@R [0-9.]+, accuracy@1 [0-9.]+, accuracy@3 [0-9.]+ \(100 queries\)"

# The classifier learns: over 30 epochs it fits the 300 rows' labels (random vectors through the
# MLP fixture: distinct features, arbitrary labels), from 1.63 to about 0.9.
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder mlp="$D/mlp.pt" --features vec --labels labels \
  --out "$WORK/v.h5" || _fail "cache-fill vec"
run "$TC_BIN/gc-train" -q --cache "$WORK/v.h5" --embeddings mlp --head mlp:64,32 --loss softmax --epochs 30 -b 50 \
  --lr 0.03 --metrics "$WORK/learn.jsonl" --json
expect_rc 0
py "
import json
l = [json.loads(x)['loss'] for x in open('$WORK/learn.jsonl')]
print('ok' if len(l) == 180 and sum(l[-6:]) / 6 < 0.7 * l[0] else 'first %r last %r' % (l[0], l[-6:]))
"
expect_out "ok"

# --select-best on the classifier's accuracy; --classifier-out is written with --out at the best.
run "$TC_BIN/gc-train" -q "${C[@]}" --loss cosface --epochs 3 -b 50 --eval-split 0.3 --stratify --eval-every 2 \
  --select-best accuracy_at_1 --out "$WORK/best-head.pt" --classifier-out "$WORK/best-cls.pt" --json
expect_rc 0
expect_out_has '"best":{"metric":"accuracy_at_1"'
expect_file "$WORK/best-cls.pt"

# A resumed run ends with the classifier of an uninterrupted one.
A=("${C[@]}" --loss arcface -b 50 --steps 8 --seed 3)
run "$TC_BIN/gc-train" -q "${A[@]}" --classifier-out "$WORK/straight-cls.pt" --out "$WORK/straight.pt"
expect_rc 0
run "$TC_BIN/gc-train" -q "${A[@]}" --steps 4 --checkpoint-dir "$WORK/ck" --out "$WORK/half.pt"
expect_rc 0
run "$TC_BIN/gc-train" -q "${A[@]}" --checkpoint-dir "$WORK/ck" --resume --classifier-out "$WORK/resumed-cls.pt"
expect_rc 0
same_params "$WORK/straight-cls.pt" "$WORK/resumed-cls.pt"
# The objective is a setting the checkpoint must match.
run "$TC_BIN/gc-train" -q "${C[@]}" --loss cosface -b 50 --steps 8 --seed 3 --checkpoint-dir "$WORK/ck" --resume
expect_rc 65
expect_err_has "changed: objective"

# Raw grouped mode: --query and --labels train the encoder itself; gradient caching is exact.
R=(--data "$D/images.h5" --query images --labels labels --encoder "$D/cnn.pt" --loss arcface --scale 16 -b 40
  -c 7 --steps 2 --optimizer sgd --lr 0.1 --seed 1)
run "$TC_BIN/gc-train" "${R[@]}" --out "$WORK/raw-gc.pt" --json
expect_rc 0
expect_out_has '"mode":"raw-grouped","objective":"arcface","classes":5'
run "$TC_BIN/gc-train" -q "${R[@]}" --no-gradcache --out "$WORK/raw-full.pt"
expect_rc 0
same_params "$WORK/raw-gc.pt" "$WORK/raw-full.pt" "$D/cnn.pt"
# Errors: each one line, exit 64 (or 73 for an output that cannot be created, 65 for data).
# Every option rule is checked message by message in unit.train_plan_test ("the objective's
# refusals", "the datasets and modules of each mode", "--select-best names a metric"); one runs
# through the tool here.
err_case() {  # err_case RC MESSAGE ARGS...
  local want_rc=$1 msg=$2
  shift 2
  run "$TC_BIN/gc-train" "$@"
  expect_rc "$want_rc"
  expect_err "gc-train: error: $msg"
}
err_case 64 "--loss: infonce trains on pairs (--query and --passage, or --query-embeddings and --passage-embeddings); labelled rows train with supcon, softmax, arcface, cosface or triplet" \
  "${C[@]}" --loss infonce
err_case 73 "$WORK/no/dir/c.pt: cannot create: no directory $WORK/no/dir" \
  "${C[@]}" --loss softmax --classifier-out "$WORK/no/dir/c.pt"
err_case 65 "$D/images.h5: labels 'images' must hold one integer per row, not uint8 rows of shape [1,28,28]" \
  --data "$D/images.h5" --query images --labels images --encoder "$D/cnn.pt"
finish
