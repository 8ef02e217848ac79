#!/usr/bin/env bash
# gc-train --data-cache smart:N,r: the SmartCache running window. Each epoch trains on N rows of a
# seeded order of the training rows; R = ceil(N r) of them are replaced per epoch by a background
# replacer writing into the slots of the rows that left. Checked against a plain-loop reference of
# the schedule (the rows of every step), hits and misses counted exactly when the replacer is held
# back, the same trained bytes whether the replacer keeps up or not, a window of every row equal to
# no cache, SIGINT while the replacer works, and usage errors.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
S=$TC_BIN/shm-cache
export TRAINCACHE_SHM_PREFIX="tc-test-smart-$$-"
trap 'kill -CONT $A 2>/dev/null; rm -f /dev/shm/"$TRAINCACHE_SHM_PREFIX"*; rm -rf "$WORK"' EXIT

# Raw grouped mode on the 300 fixture images, batches of 40.
TRAIN=("$TC_BIN/gc-train" -q --json --data "$D/images.h5" --query images --labels labels --encoder "$D/cnn.pt"
  -b 40 -c 20)
# trained NAME ARGS...: a run writing $WORK/NAME.pt, .json and .log (--batch-log).
trained() {
  local name=$1
  shift
  tool "${TRAIN[@]}" "$@" --out "$WORK/$name.pt" --batch-log "$WORK/$name.log" > "$WORK/$name.json" 2> "$WORK/$name.err"
  rc=$?
  expect_rc 0
}
slabs_left() { ls /dev/shm | grep "^${TRAINCACHE_SHM_PREFIX}" | sed "s/^${TRAINCACHE_SHM_PREFIX}//"; }

# reference LOG JSON SEED N R EPOCHS [noshuffle] [stalled]: records a check of the rows of every
# step in LOG against the window schedule computed with plain loops (torch.randperm draws the same
# orders as gc-train), and with "stalled" (the replacer never stores) the data_cache counts in JSON,
# replaying the slot protocol: key k in slot k mod (N+R), a miss stored unless the slot holds a
# later key. check_references runs every recorded check in one Python process (importing torch
# costs about 2 s a start): one line each, LOG ok or the failed assertion.
REF_CASES=()
reference() { REF_CASES+=("$*"); }
check_references() {
  local want=() c
  for c in "${REF_CASES[@]}"; do want+=("${c%% *} ok"); done
  run "$TC_PYTHON" -c "
import json, sys, torch
def randperm(n, s):
    g = torch.Generator(); g.manual_seed(s % 2**64)
    return torch.randperm(n, generator=g).tolist()
def check(a):
    log, res, seed, N, R, epochs = a[0], a[1], int(a[2]), int(a[3]), int(a[4]), int(a[5])
    shuffle, stalled = 'noshuffle' not in a[6:], 'stalled' in a[6:]
    L, B = 300, 40
    order = randperm(L, seed * 1000003 - 1) if shuffle and R > 0 else list(range(L))
    per_epoch = N // B
    steps = [json.loads(l) for l in open(log)]
    assert len(steps) == per_epoch * epochs, len(steps)
    slot, hits, misses, stored, late = {}, 0, 0, 0, []
    for st in steps:
        s = st['step'] - 1
        e, b = divmod(s, per_epoch)
        perm = randperm(N, seed * 1000003 + e) if shuffle else list(range(N))
        keys = [e * R + perm[i] for i in range(b * B, (b + 1) * B)]
        assert st['epoch'] == e and st['rows'] == [order[k % L] for k in keys], st['step']
        if b == 0:
            late.append(sum(slot.get(k % (N + R)) != k for k in range(e * R, e * R + N)))
        for k in keys:
            if slot.get(k % (N + R)) == k:
                hits += 1
            else:
                misses += 1
                if slot.get(k % (N + R), -1) < k:
                    slot[k % (N + R)] = k
                    stored += 1
    c = json.load(open(res))['data_cache']
    w = c['window']
    assert (w['cache_num'], w['replace_num'], c['slots']) == (N, R, N + R), (w, c['slots'])
    assert [x['epoch'] for x in w['epochs']] == list(range(epochs))
    if stalled:
        got = (c['hits'], c['misses'], c['stored'], w['replaced'], [x['late_rows'] for x in w['epochs']])
        assert got == (hits, misses, stored, 0, late), (got, (hits, misses, stored, 0, late))
for case in sys.argv[1:]:
    try:
        check(case.split())
        print(case.split()[0], 'ok')
    except AssertionError as e:
        print(case.split()[0], 'failed:', e)" "${REF_CASES[@]}"
  expect_out "$(printf '%s\n' "${want[@]}")"
}

# A window of 120 rows, 30 replaced per epoch, 4 epochs of 3 batches: the schedule, twice (the
# replacer keeping up, and held back so that every row comes from the steps' own reads), with
# the same trained bytes.
trained win --data-cache smart:120,0.25 --epochs 4 --seed 3
reference "$WORK/win.log" "$WORK/win.json" 3 120 30 4
TRAINCACHE_TEST_REPLACER_DELAY_MS=600000 trained stalled --data-cache smart:120,0.25 --epochs 4 --seed 3
reference "$WORK/stalled.log" "$WORK/stalled.json" 3 120 30 4 stalled
expect_same "$WORK/win.pt" "$WORK/stalled.pt"
py "
import json
w = json.load(open('$WORK/win.json'))['data_cache']['window']
print(w['replaced'] > 0, w['epochs'][0]['late_rows'])"
expect_out "True 120"
# Without --shuffle the window walks the rows in file order.
trained plainorder --data-cache smart:80,0.5 --epochs 3 --no-shuffle
reference "$WORK/plainorder.log" "$WORK/plainorder.json" 0 80 40 3 noshuffle
# N + R is clamped to the rows (MONAI's clamping): smart:250,0.5 replaces 50.
trained clamp --data-cache smart:250,0.5 --epochs 2 --seed 1
reference "$WORK/clamp.log" "$WORK/clamp.json" 1 250 50 2
check_references
# A window of every row trains exactly as without a cache (the same batches).
trained none --stream --epochs 2 --seed 4
trained all --data-cache smart:300,0.1 --epochs 2 --seed 4
expect_same "$WORK/none.pt" "$WORK/all.pt"
expect_same "$WORK/none.log" "$WORK/all.log"
expect_eq "$(slabs_left)" "" "slabs after the runs"

# SIGINT while the replacer works. A: a run of 6 epochs holding the window slab, frozen (SIGSTOP)
# after its first step; B: a second run of the same schedule attached to it, its replacer slowed
# down, is interrupted: it exits 130 at once and leaves no slot being written by it; A then
# finishes with the same bytes as a run of its own.
trained solo6 --data-cache smart:120,0.25 --epochs 6 --seed 3
TRAINCACHE_TEST_REPLACER_DELAY_MS=600000 "${TRAIN[@]}" --data-cache smart:120,0.25 --epochs 6 --seed 3 \
  --out "$WORK/a.pt" --metrics "$WORK/a.jsonl" > /dev/null 2> "$WORK/a.err" &
A=$!
for _ in $(seq 600); do [ -s "$WORK/a.jsonl" ] && break; sleep 0.05; done
[ -s "$WORK/a.jsonl" ] && _ok || _fail "A took no step in 30 s: what follows would not test a run in progress"
kill -STOP $A
slab=$(slabs_left)
expect_eq "$(printf '%s\n' "$slab" | wc -l)" "1" "one window slab"
# B's replacer sleeps ten minutes before each window: waiting for it would outlast the 60 s this
# test gives B before it kills it (exit 137, not 130).
TRAINCACHE_TEST_REPLACER_DELAY_MS=600000 "${TRAIN[@]}" --data-cache smart:120,0.25 --epochs 400 --seed 3 \
  --metrics "$WORK/b.jsonl" > /dev/null 2> "$WORK/b.err" &
B=$!
for _ in $(seq 300); do [ -s "$WORK/b.jsonl" ] && break; sleep 0.1; done
[ -s "$WORK/b.jsonl" ] && _ok || _fail "B took no step in 30 s: the interrupt would not come while its replacer works"
kill -INT $B
for _ in $(seq 1200); do
  state=$(ps -o stat= -p $B) && [[ $state != Z* ]] || break  # gone, or exited and not yet waited for
  sleep 0.05
done
kill -KILL $B 2>/dev/null
wait $B
expect_eq "$?" "130" "exit after SIGINT without waiting for the replacer"
expect_eq "$(tail -n 1 "$WORK/b.err" | sed 's/ at step [0-9]*/ at step N/')" \
  "gc-train: interrupted at step N (no --checkpoint-dir: progress lost)"
run "$S" stat "$slab" --json
printf '%s' "$out" > "$WORK/stat.json"
py "
import json, numpy as np
s = json.load(open('$WORK/stat.json'))['slab']
w = np.fromfile(s['path'], dtype='<u8', count=s['slots'], offset=s['offsets']['states'])
print(int((((w & 0xff) == 1) & ((w >> 8) == $B)).sum()), int(((w & 0xff) == 2).sum()) > 0)"
expect_out "0 True"
kill -CONT $A
wait $A
expect_eq "$?" "0" "A after B's interrupt"
expect_same "$WORK/solo6.pt" "$WORK/a.pt"
expect_eq "$(slabs_left)" "" "slabs after SIGINT"

# Usage errors (64), each before anything is read.
for bad in "smart:0,0.5|smart:N,r needs a window of N > 0 rows and a replace rate 0 < r <= 1, got '0,0.5'" \
  "smart:100|smart:N,r needs a window of N > 0 rows and a replace rate 0 < r <= 1, got '100'" \
  "smart:100,0|smart:N,r needs a window of N > 0 rows and a replace rate 0 < r <= 1, got '100,0'" \
  "smart:100,1.5|smart:N,r needs a window of N > 0 rows and a replace rate 0 < r <= 1, got '100,1.5'" \
  "smart:x,0.5|smart:N,r needs a window of N > 0 rows and a replace rate 0 < r <= 1, got 'x,0.5'"; do
  run "${TRAIN[@]}" --epochs 1 --data-cache "${bad%%|*}"
  expect_rc 64
  expect_err "gc-train: error: --data-cache: ${bad#*|}"
done
run "${TRAIN[@]}" --epochs 1 --data-cache smart:100,0.5 --data-cache-keep w
expect_rc 64
expect_err "gc-train: error: --data-cache-keep: needs --data-cache full or stochastic:F (a SmartCache window holds one run's rows)"
run "${TRAIN[@]}" --epochs 1 --data-cache smart:100,0.5 --data-cache-limit 1M
expect_rc 64
expect_err "gc-train: error: --data-cache-limit: needs --data-cache stochastic:F (the limit replaces F)"
# A window smaller than a batch leaves no whole batch.
run "${TRAIN[@]}" --epochs 1 --data-cache smart:30,0.5
expect_rc 64
expect_err "gc-train: error: --batch-size: 40 is larger than the 30 rows of the SmartCache window (use a smaller batch or --no-drop-last)"
expect_eq "$(slabs_left)" "" "slabs after usage errors"
finish
