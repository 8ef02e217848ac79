#!/usr/bin/env bash
# Data-parallel gc-train when things go wrong, over c10d/Gloo on loopback: checkpoints and resume
# (the same world size continues exactly), SIGINT to one rank, a rank killed, a rank that fails
# (before training, and hanging) tells the others why.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/dist_lib.sh"
cached_job

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

# ---- a rank killed mid-run: the others stop at once with a clear error, not hang. The rank is
# gc-train itself (RANKS_DIRECT=1): a killed client's rank dies a moment later, by the server's
# hand, and in one CI run of three the survivors then waited out the 60 s timeout (not understood).
RANKS_DIRECT=1 start_ranks 3 kill "${CACHED[@]}" --steps 1000000 --lr 0.01 --metrics "$WORK/kill.jsonl"
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
# rm fails ("Directory not empty") when rank 0 creates a checkpoint's temporary file in the folder
# while rm empties it: again until the folder is gone.
until rm -rf "$WORK/late" 2>/dev/null; do :; done
echo in-the-way >"$WORK/late"
start=$SECONDS
wait_ranks 2 late
expect_eq "$((SECONDS - start < 50))" 1 "ranks exited well before the 60 s --dist-timeout (took $((SECONDS - start)) s)"
# The folder goes while rank 0 may be writing a checkpoint: its temporary file then cannot be
# reopened (74) instead of created (73), and a checkpoint due between the rm and the file taking
# the folder's place finds no folder at all (73); each is the one line both ranks give.
late0=$(tail -1 "$WORK/late.err.0")
case "$(cat "$WORK/late.rc.0"):$late0" in
  "73:gc-train: error: $WORK/late/checkpoint.pt: cannot create a temporary file beside it: not a directory" | \
    "73:gc-train: error: $WORK/late/checkpoint.pt: cannot create a temporary file beside it: no such file or directory" | \
    "74:gc-train: error: $WORK/late/checkpoint.pt: cannot reopen the temporary file: no such file or directory")
    _ok ;;
  *) _fail "rank 0 exit and line (its checkpoint cannot be written): $(cat "$WORK/late.rc.0"): $late0" ;;
esac
expect_eq "$(cat "$WORK/late.rc.1")" 69 "rank 1 exit"
expect_eq "$(cat "$WORK/late.err.1")" "gc-train: error: rank 1 of 2: rank 0 failed: ${late0#gc-train: error: }"

# A hung rank (stopped, sockets open): the others give up after --dist-timeout.
RANKS_DIRECT=1 start_ranks 2 hang "${CACHED[@]}" --steps 1000000 --lr 0.01 --dist-timeout 5 --metrics "$WORK/hang.jsonl"
wait_lines "$WORK/hang.jsonl" 20
hung=$(pgrep -P "${PIDS[1]}")
# A rank ignores SIGPIPE (bit 12 of SigIgn): Gloo's write to a peer that has just died then fails
# and is reported as a failed collective, where it once ended a survivor with 141 and no word.
sigign=$(awk '/^SigIgn:/ {print $2}' "/proc/$hung/status")
expect_eq "$((0x$sigign >> 12 & 1))" 1 "rank 1 ignores SIGPIPE (SigIgn $sigign)"
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
expect_eq "$(cat "$WORK/term.err")" "gc-train: interrupted: stopping after this step (a checkpoint is saved with --checkpoint-dir); interrupt again to stop at once
gc-train: error: rank 0 of 2: interrupted while waiting for the other ranks"

finish
