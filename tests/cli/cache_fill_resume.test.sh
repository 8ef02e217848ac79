#!/usr/bin/env bash
# Crash safety: SIGKILL at any moment, then a re-run, gives a file byte-identical to an
# uninterrupted run; SIGINT stops cleanly with exit 130 and keeps progress.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
# 5,000 of big.h5's rows: 20 commits, enough for kills early, midway and late.
ARGS=(--input "$D/big.h5" --rows 0:5000 --encoder cnn="$D/cnn.pt" --features images --labels labels
      --batch-size 64 --commit-rows 256 --threads 2 --workers 2)

run "$TC_BIN/cache-fill" "${ARGS[@]}" --out "$WORK/ref.h5"
expect_rc 0

for target in 0 512 2048 3072; do
  out_file="$WORK/k$target.h5"
  killed_fill "$out_file" "$target" "${ARGS[@]}"
  expect_rc 0
  if [ "$target" -gt 0 ]; then expect_err_re "\(([0-9]+) encoded, resumed at [0-9]+\)"; fi
  expect_same "$out_file" "$WORK/ref.h5"
  expect_no_file "$out_file.partial"
done

# SIGINT: exit 130, progress kept and named, then resumed to the same bytes.
"$TC_BIN/cache-fill" "${ARGS[@]}" --out "$WORK/int.h5" 2>"$WORK/int.err" &
pid=$!
wait_committed "$WORK/int.h5.partial" 1024
kill -INT "$pid"
wait "$pid"
rc=$?
err=$(cat "$WORK/int.err")
expect_rc 130
# The signal is answered at once with what happens now, then the run says what it kept.
expect_err_re "^cache-fill: interrupted: stopping after this batch, what is encoded kept \(run the same command again to resume\); interrupt again to stop at once
cache-fill: interrupted after [0-9]+ rows; progress kept in $WORK/int.h5.partial \(run the same command again to resume\)$"
expect_file "$WORK/int.h5.partial/journal.json"
expect_no_file "$WORK/int.h5"
run "$TC_BIN/cache-fill" "${ARGS[@]}" --out "$WORK/int.h5"
expect_rc 0
expect_err_re "resumed at [0-9]+"
expect_same "$WORK/int.h5" "$WORK/ref.h5"
# A second signal stops at once, by that signal, and leaves neither the lock nor a temporary file;
# what was committed before is resumed to the same bytes (issue 84, item 16).
"$TC_BIN/cache-fill" "${ARGS[@]}" --out "$WORK/int2.h5" 2>"$WORK/int2.err" &
pid=$!
wait_committed "$WORK/int2.h5.partial" 1024
kill -INT "$pid"
kill -INT "$pid"
wait "$pid"
rc=$?
expect_rc 130  # the shell's 128 + SIGINT: ended by the signal
expect_no_file "$WORK/int2.h5.lock"
left=$(find "$WORK" -name '*.tmp' -o -name 'int2.h5.lock')
expect_eq "$left" ""
run "$TC_BIN/cache-fill" "${ARGS[@]}" --out "$WORK/int2.h5"
expect_rc 0
expect_same "$WORK/int2.h5" "$WORK/ref.h5"
# A run killed while it published leaves a cache-sized temporary file beside the cache: the next run
# to hold the cache's lock removes it (only a holder of the lock writes such files) and says so.
head -c 100000 /dev/zero > "$WORK/.int2.h5.k1LLedWh1leP.tmp"
run "$TC_BIN/cache-fill" "${ARGS[@]}" --out "$WORK/int2.h5"
expect_rc 0
expect_err_has "cache-fill: warning: $WORK/int2.h5: removed 1 temporary file(s) beside it that a killed run had left"
expect_no_file "$WORK/.int2.h5.k1LLedWh1leP.tmp"
# A signal during the last batch (here the only one) stops before the publish, as the notice says,
# instead of publishing and exiting 0; running again publishes what was encoded.
ONE=(--input "$D/big.h5" --encoder cnn="$D/cnn.pt" --features images --batch-size 50000 --threads 1 --workers 1)
"$TC_BIN/cache-fill" "${ONE[@]}" --out "$WORK/last.h5" 2>"$WORK/last.err" &
pid=$!
wait_committed "$WORK/last.h5.partial" 0
# Until the run has had 1 s on a CPU: the model loads in ~0.1 s of it, the one batch's forward then
# takes ~4 s (CPU time, not a sleep: on a loaded machine 1.5 s of wall time ended before the batch).
for _ in $(seq 1200); do
  [ "$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)" -ge "$(getconf CLK_TCK)" ] && break
  sleep 0.05
done
kill -INT "$pid"
wait "$pid"
rc=$?
err=$(cat "$WORK/last.err")
expect_rc 130
expect_err_re "cache-fill: interrupted after 12000 rows; progress kept in $WORK/last.h5.partial"
expect_no_file "$WORK/last.h5"
run "$TC_BIN/cache-fill" "${ONE[@]}" --out "$WORK/last.h5"
expect_rc 0

# Progress of another run is never mixed in: a different fingerprint is refused, naming what changed
# (issue 29, item 18: it named nothing).
"$TC_BIN/cache-fill" "${ARGS[@]}" --out "$WORK/mix.h5" 2>/dev/null &
pid=$!
wait_committed "$WORK/mix.h5.partial" 512
kill -KILL "$pid"; wait "$pid" 2>/dev/null
run "$TC_BIN/cache-fill" "${ARGS[@]}" --dtype float16 --out "$WORK/mix.h5"
expect_rc 73
expect_err "cache-fill: error: $WORK/mix.h5.partial: holds progress of a run with another fingerprint (changed: options/dtype); use --force to discard it"
run "$TC_BIN/cache-fill" "${ARGS[@]}" --dtype float16 --out "$WORK/mix.h5" --force
expect_rc 0
expect_err_re "\(5000 encoded\)"
# Out of memory is a resource failure, not bad input: 69, the journal kept (issue 43, item 2: it was
# 65 "rejected the input" and the journal was deleted). The encoder asks for 256 TiB on any batch
# that is not 32 rows (the last batch of 100 rows, after 96 are committed): more than a process's
# address space, so the allocation fails even where the kernel overcommits memory (a machine that
# granted 32 TiB killed the fill when the zeros were written). oom.pt and wide.pt: scripts/make-test-fixtures.
OOM=(--input "$D/images.h5" --features vec --encoder oom="$D/oom.pt" --rows 0:100 --batch-size 32 --commit-rows 32
     --threads 2 --out "$WORK/oom.h5")
run "$TC_BIN/cache-fill" "${OOM[@]}"
expect_rc 69
expect_err_re "^cache-fill: error: encoder 'oom': out of memory: .*DefaultCPUAllocator: .* \(a smaller --batch-size needs less\); progress kept in $WORK/oom.h5.partial \(run again to resume\)$"
py "import json; print(json.load(open('$WORK/oom.h5.partial/journal.json'))['committed_rows'])"
expect_out "96"
# Out of memory outside the forward (here the copy of the last batch's output to float16 on the
# host: the model returns a zero-stride view of 2^46 columns) is the same 69 with the journal kept
# (issue 62, item 8: it was 70, the journal deleted). One classifier for every place.
run "$TC_BIN/cache-fill" --input "$D/images.h5" --features vec --encoder wide="$D/wide.pt" --rows 0:100 \
  --batch-size 32 --commit-rows 32 --threads 2 --no-optimize --dtype float16 --out "$WORK/wide.h5"
expect_rc 69
expect_err_re "^cache-fill: error: out of memory: .* \(a smaller --batch-size needs less\); progress kept in $WORK/wide.h5.partial \(run again to resume\)$"
py "import json; print(json.load(open('$WORK/wide.h5.partial/journal.json'))['committed_rows'])"
expect_out "96"
finish
