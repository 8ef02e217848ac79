#!/usr/bin/env bash
# Data-parallel gc-train over c10d/Gloo on loopback: W ranks x B/W rows train exactly like one
# process with batch B; checkpoints, resume, SIGINT, failing (with and without a reason), killed and
# hanging ranks, torchrun.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
export MASTER_ADDR=127.0.0.1
export TRAINCACHE_SHM_PREFIX="tcdist-$$-"
trap 'rm -f /dev/shm/"$TRAINCACHE_SHM_PREFIX"*; rm -rf "$WORK"' EXIT

free_port() { "$TC_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# A build without Gloo (pip's LibTorch ships no Gloo headers, and no GPU here for NCCL): every case
# below needs gloo, so only its refusal is checked, and the test reports itself skipped (77).
if ! have_gloo; then
  RANK=0 WORLD_SIZE=2 MASTER_PORT=$(free_port) run timeout 60 "$TC_BIN/gc-train" --data "$D/pairs.h5" --query q \
    --passage p --encoder "$D/tower.pt" --steps 1 --dist-backend gloo
  expect_rc 69
  expect_err "gc-train: error: --dist-backend: gloo: traincache was built without Gloo (this LibTorch ships no Gloo headers; see docs/gpu.md)"
  finish || exit 1
  echo "skipped: this build has no Gloo (no Gloo headers came with its LibTorch): data-parallel runs on the CPU are not checked"
  exit 77
fi

# start_ranks W NAME ARGS...: starts W ranks of gc-train ARGS in the background, each bounded by
# `timeout` (PIDS[r] is rank r's timeout process, gc-train its child); rank r's stdout and stderr
# go to $WORK/NAME.out.r and .err.r. wait_ranks W NAME: waits for them, exit codes to NAME.rc.r.
# launch W NAME ARGS...: both.
start_ranks() {
  local w=$1 name=$2 port r
  shift 2
  port=$(free_port)
  PIDS=()
  for ((r = 0; r < w; r++)); do
    RANK=$r WORLD_SIZE=$w MASTER_PORT=$port timeout 120 "$TC_BIN/gc-train" --dist-timeout 60 "$@" \
      >"$WORK/$name.out.$r" 2>"$WORK/$name.err.$r" <&- &
    PIDS+=($!)
  done
}
wait_ranks() {
  local r
  for ((r = 0; r < $1; r++)); do
    wait "${PIDS[$r]}"
    echo $? >"$WORK/$2.rc.$r"
  done
}
launch() {
  start_ranks "$@"
  wait_ranks "$1" "$2"
}

# wait_lines FILE N: waits (at most 120 s: a loaded CI machine starts ranks slowly) until FILE has N
# lines; a failure of its own when it never does, rather than a confusing one later.
wait_lines() {
  local _
  for _ in $(seq 1200); do
    [ "$({ wc -l <"$1"; } 2>/dev/null || echo 0)" -ge "$2" ] && return
    sleep 0.1
  done
  _fail "$1 never reached $2 lines"
}

# expect_ranks_ok W NAME: every rank exited 0; only rank 0 wrote to stdout.
expect_ranks_ok() {
  local r
  for ((r = 0; r < $1; r++)); do
    expect_eq "$(cat "$WORK/$2.rc.$r")" 0 "$2 rank $r exit (stderr: $(head -c 600 "$WORK/$2.err.$r"))"
    [ "$r" -gt 0 ] && expect_eq "$(cat "$WORK/$2.out.$r")" "" "$2 rank $r stdout"
  done
}

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

# ---- cached embeddings, grouped (supervised contrastive): 3 ranks sharing one slab
"$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$D/cnn.pt" --features images --labels labels \
  --out "$WORK/c.h5" || _fail "cache-fill"
CACHED=(--cache "$WORK/c.h5" --embeddings cnn --head mlp:32,16 --batch-size 64 --chunk-size 8 --steps 6
        --optimizer sgd --lr 0.5 --seed 2 --threads 1)
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

# ---- checkpoints: rank 0 writes them; resuming with the same world size continues exactly
CK=("${CACHED[@]}" --steps 8 --checkpoint-dir "$WORK/ck")
launch 2 straight "${CACHED[@]}" --steps 8 --checkpoint-dir "$WORK/ck0" --out "$WORK/straight.pt"
expect_ranks_ok 2 straight
launch 2 first "${CK[@]}" --steps 4
expect_ranks_ok 2 first
launch 2 second "${CK[@]}" --resume --out "$WORK/resumed.pt"
expect_ranks_ok 2 second
same_params "$WORK/straight.pt" "$WORK/resumed.pt" "" 0
launch 3 wrong "${CK[@]}" --resume
for r in 0 1 2; do
  expect_eq "$(cat "$WORK/wrong.rc.$r")" 64 "resume with another world size, rank $r"
  expect_eq "$(tail -1 "$WORK/wrong.err.$r")" \
    "gc-train: error: $WORK/ck/checkpoint.pt: checkpoint was written by 2 process(es); resume it with WORLD_SIZE=2 (this run has 3)"
done

# Ranks that do not see the same checkpoint would diverge: refused on every rank.
port=$(free_port)
pids=()
for r in 0 1; do  # by hand: rank 1 is given another directory
  dir="$WORK/ck"
  [ "$r" -eq 1 ] && dir="$WORK/elsewhere"
  RANK=$r WORLD_SIZE=2 MASTER_PORT=$port timeout 120 "$TC_BIN/gc-train" "${CK[@]}" --checkpoint-dir "$dir" --resume \
    >/dev/null 2>"$WORK/apart.err.$r" <&- &
  pids+=($!)
done
for r in 0 1; do
  wait "${pids[$r]}"
  expect_eq "$?" 65 "rank $r exit when ranks see different checkpoints"
done
expect_eq "$(tail -1 "$WORK/apart.err.0")" \
  "gc-train: error: $WORK/ck: ranks would start at different steps (8, 0): every rank must see the same checkpoint directory"

# ---- SIGINT to one rank: every rank stops after the same step, rank 0 saves the checkpoint
start_ranks 2 int "${CACHED[@]}" --steps 1000000 --lr 0.01 --checkpoint-dir "$WORK/int" --metrics "$WORK/int.jsonl"
wait_lines "$WORK/int.jsonl" 20
kill -INT "$(pgrep -P "${PIDS[1]}")"  # rank 1 only
wait_ranks 2 int
for r in 0 1; do
  expect_eq "$(cat "$WORK/int.rc.$r")" 130 "interrupted rank $r exit"
done
err=$(cat "$WORK/int.err.0")
expect_err_re "interrupted at step ([0-9]+); checkpoint $WORK/int/checkpoint.pt \(rerun with --resume\)$"
stopped=${BASH_REMATCH[1]:-0}
expect_eq "$(wc -l <"$WORK/int.jsonl")" "$stopped" "metrics lines = the step rank 0 reported"
launch 2 intres "${CACHED[@]}" --lr 0.01 --checkpoint-dir "$WORK/int" --resume --steps $((stopped + 2))
expect_ranks_ok 2 intres
expect_eq "$(head -2 "$WORK/intres.err.0" | tail -1)" "gc-train: resuming at step $stopped from $WORK/int/checkpoint.pt"

# ---- a rank killed mid-run: the others stop at once with a clear error, not hang
start_ranks 3 kill "${CACHED[@]}" --steps 1000000 --lr 0.01 --metrics "$WORK/kill.jsonl"
wait_lines "$WORK/kill.jsonl" 20
kill -KILL "$(pgrep -P "${PIDS[1]}")"
start=$SECONDS
wait_ranks 3 kill
expect_eq "$((SECONDS - start < 50))" 1 "survivors exited well before the 60 s --dist-timeout (took $((SECONDS - start)) s)"
for r in 0 2; do
  expect_eq "$(cat "$WORK/kill.rc.$r")" 69 "survivor rank $r exit"
  err=$(cat "$WORK/kill.err.$r")
  expect_err_re "gc-train: error: rank $r of 3: (all-gather|all-reduce) \(step [0-9]+\) failed: .*\(another rank exited, hung or cannot be reached\)$"
done

# ---- a rank that fails tells the others why: they stop within seconds with its reason (69)
# Before training (rank 1 is given a cache that does not exist; rank 0 waits for it to be ready).
port=$(free_port)
pids=()
start=$SECONDS
for r in 0 1; do
  cache="$WORK/c.h5"
  [ "$r" -eq 1 ] && cache="$WORK/missing.h5"
  RANK=$r WORLD_SIZE=2 MASTER_PORT=$port timeout 120 "$TC_BIN/gc-train" "${CACHED[@]:2}" --cache "$cache" \
    >/dev/null 2>"$WORK/early.err.$r" <&- &
  pids+=($!)
done
wait "${pids[0]}"
expect_eq "$?" 69 "rank 0 exit when rank 1 fails at start-up"
wait "${pids[1]}"
expect_eq "$?" 66 "failing rank 1 exit"
expect_eq "$((SECONDS - start < 50))" 1 "both ranks exited well before the 60 s --dist-timeout (took $((SECONDS - start)) s)"
expect_eq "$(cat "$WORK/early.err.1")" "gc-train: error: $WORK/missing.h5: no such file or directory"
expect_eq "$(cat "$WORK/early.err.0")" \
  "gc-train: error: rank 0 of 2: rank 1 failed: $WORK/missing.h5: no such file or directory"

# During training: rank 0 (which serves the store) cannot write its checkpoint; rank 1, waiting in
# a collective, learns why before rank 0's store goes away.
start_ranks 2 late "${CACHED[@]}" --steps 1000000 --lr 0.01 --checkpoint-every 20 --checkpoint-dir "$WORK/late" \
  --metrics "$WORK/late.jsonl"
for _ in $(seq 1200); do [ -s "$WORK/late/checkpoint.pt" ] && break; sleep 0.1; done
rm -rf "$WORK/late" && echo in-the-way >"$WORK/late"
start=$SECONDS
wait_ranks 2 late
expect_eq "$((SECONDS - start < 50))" 1 "ranks exited well before the 60 s --dist-timeout (took $((SECONDS - start)) s)"
# The folder goes while rank 0 may be writing a checkpoint: its temporary file then cannot be
# reopened (74) instead of created (73); either is the one line both ranks give.
late0=$(tail -1 "$WORK/late.err.0")
case "$(cat "$WORK/late.rc.0"):$late0" in
  "73:gc-train: error: $WORK/late/checkpoint.pt: cannot create a temporary file beside it: not a directory" | \
    "74:gc-train: error: $WORK/late/checkpoint.pt: cannot reopen the temporary file: no such file or directory")
    _ok ;;
  *) _fail "rank 0 exit and line (its checkpoint cannot be written): $(cat "$WORK/late.rc.0"): $late0" ;;
esac
expect_eq "$(cat "$WORK/late.rc.1")" 69 "rank 1 exit"
expect_eq "$(cat "$WORK/late.err.1")" "gc-train: error: rank 1 of 2: rank 0 failed: ${late0#gc-train: error: }"

# A hung rank (stopped, sockets open): the others give up after --dist-timeout.
start_ranks 2 hang "${CACHED[@]}" --steps 1000000 --lr 0.01 --dist-timeout 5 --metrics "$WORK/hang.jsonl"
wait_lines "$WORK/hang.jsonl" 20
hung=$(pgrep -P "${PIDS[1]}")
kill -STOP "$hung"
start=$SECONDS
wait "${PIDS[0]}"
expect_eq "$?" 69 "rank 0 exit when rank 1 hangs"
took=$((SECONDS - start))
expect_eq "$((took >= 4 && took < 50))" 1 "rank 0 gave up after the 5 s timeout, not the default (took $took s)"
err=$(cat "$WORK/hang.err.0")
expect_err_re "gc-train: error: rank 0 of 2: (all-gather|all-reduce) \(step [0-9]+\) failed: Timed out waiting 5000ms"
kill -KILL "$hung"
kill -CONT "$hung"
wait "${PIDS[1]}"

# A rank whose peers never come: bounded by --dist-timeout as well.
start=$SECONDS
run env RANK=1 WORLD_SIZE=2 MASTER_PORT="$(free_port)" "$TC_BIN/gc-train" "${CACHED[@]}" --dist-timeout 2
expect_rc 69
expect_err_re "gc-train: error: rank 1 of 2: connecting \(start-up\) failed: .*timed out.*\(another rank exited, hung or cannot be reached\)$"
expect_eq "$((SECONDS - start < 50))" 1 "lonely rank gave up after its 2 s timeout, not the default (took $((SECONDS - start)) s)"
run env RANK=0 WORLD_SIZE=2 MASTER_PORT="$(free_port)" "$TC_BIN/gc-train" "${CACHED[@]}" --dist-timeout 2
expect_rc 69
expect_err "gc-train: error: rank 0 of 2: start-up failed: 1 of 2 ranks were ready after waiting 2000ms (another rank exited, hung or cannot be reached)"

# A rank waiting for the others to be ready stops at once on SIGTERM (what torchrun sends).
RANK=0 WORLD_SIZE=2 MASTER_PORT="$(free_port)" timeout 120 "$TC_BIN/gc-train" "${CACHED[@]}" \
  >/dev/null 2>"$WORK/term.err" <&- &
pid=$!
# Waits until rank 0 listens (ss, where iproute2 is installed: the Debian 13 root has none) or, without
# ss, until it has started and had 3 s to begin waiting; never longer than the 120 s of `timeout`.
for _ in $(seq 600); do
  child=$(pgrep -P $pid)
  if command -v ss >/dev/null; then
    [ -n "$child" ] && ss -ltnp 2>/dev/null | grep -q "pid=$child," && break
  elif [ -n "$child" ]; then
    sleep 3
    break
  fi
  sleep 0.1
done
sleep 1
start=$SECONDS
kill -TERM "$(pgrep -P $pid)"
wait $pid
expect_eq "$?" 130 "rank 0 exit on SIGTERM while waiting for rank 1"
expect_eq "$((SECONDS - start <= 20))" 1 "stopped within 20 s of SIGTERM, not at the timeout (took $((SECONDS - start)) s)"
expect_eq "$(cat "$WORK/term.err")" "gc-train: error: rank 0 of 2: interrupted while waiting for the other ranks"

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
