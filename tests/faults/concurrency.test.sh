#!/usr/bin/env bash
# Concurrent writers to one output: a run holds an advisory lock on its output (cache-fill) or
# checkpoint directory (gc-train) for its whole duration; a second run exits 75 naming the
# holder's pid, and the published cache is always the one an uninterrupted single run writes.
source "$(dirname "$0")/../cli/lib.sh"
D=$TC_DATA
FILL=(--input "$D/big.h5" --rows 0:4000 --encoder cnn="$D/cnn.pt" --features images --labels labels
      --batch-size 64 --commit-rows 256 --threads 1 --workers 1 -q)

run "$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/ref.h5"
expect_rc 0

# A lock held by another process: exit 75, its pid named.
hold_lock "$WORK/held.h5.lock" 4242
run "$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/held.h5"
expect_rc 75
expect_err "cache-fill: error: $WORK/held.h5: in use by another cache-fill run (pid 4242); try again when it has finished"
expect_no_file "$WORK/held.h5.partial"
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

# A second run while the first is surely running (it has committed rows and holds the lock): 75,
# and the first publishes the single run's bytes. (The trials below start both at once, and may
# not overlap: this one always does.)
"$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/over.h5" 2>"$WORK/a.err" &
a=$!
wait_committed "$WORK/over.h5.partial" 256
run "$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/over.h5"
if kill -0 "$a" 2>/dev/null; then _ok; else _fail "the first run ended before the second started"; fi
expect_rc 75
expect_err_re "^cache-fill: error: $WORK/over.h5: in use by another cache-fill run \(pid $a\); try again when it has finished$"
wait "$a"
expect_eq "$?" 0 "the first run's exit"
expect_same "$WORK/over.h5" "$WORK/ref.h5"

# Two real runs at once, four times: each either publishes or exits 75 (never both fail, never a
# torn cache), and the published file equals the single run's bytes.
for trial in 1 2 3 4; do
  out_file="$WORK/t$trial.h5"
  "$TC_BIN/cache-fill" "${FILL[@]}" --out "$out_file" 2>"$WORK/a.err" &
  a=$!
  "$TC_BIN/cache-fill" "${FILL[@]}" --out "$out_file" 2>"$WORK/b.err" &
  b=$!
  wait $a; ra=$?
  wait $b; rb=$?
  codes="$ra $rb"
  case "$codes" in
    "0 0"|"0 75"|"75 0") _ok ;;
    *) _fail "trial $trial: exit codes $codes ($(cat "$WORK/a.err" "$WORK/b.err"))" ;;
  esac
  expect_same "$out_file" "$WORK/ref.h5"
  for e in a b; do
    if [ -s "$WORK/$e.err" ]; then
      grep -q "^cache-fill: error: $out_file: in use by another cache-fill run (pid [0-9]*); try again when it has finished\$" \
        "$WORK/$e.err" && _ok || _fail "trial $trial: unexpected message: $(cat "$WORK/$e.err")"
    fi
  done
  expect_no_file "$out_file.lock"
done

# gc-train: two runs on one checkpoint directory.
mkdir "$WORK/ck"
hold_lock "$WORK/ck/checkpoint.pt.lock" 4343
run "$TC_BIN/gc-train" --data "$D/pairs.h5" --query q --passage p --encoder "$D/tower.pt" --batch-size 32 \
  --steps 2 --checkpoint-dir "$WORK/ck"
expect_rc 75
expect_err "gc-train: error: $WORK/ck/checkpoint.pt: in use by another gc-train run (pid 4343); try again when it has finished"
expect_no_file "$WORK/ck/checkpoint.pt"
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
run "$TC_BIN/gc-train" --data "$D/pairs.h5" --query q --passage p --encoder "$D/tower.pt" --batch-size 32 \
  --steps 2 --checkpoint-dir "$WORK/ck" -q
expect_rc 0
expect_file "$WORK/ck/checkpoint.pt"
expect_no_file "$WORK/ck/checkpoint.pt.lock"

finish
