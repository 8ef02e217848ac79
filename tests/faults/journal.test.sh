#!/usr/bin/env bash
# A tampered or damaged cache-fill journal is refused before anything is resumed from it (exit 65,
# "journal damaged: ...; --force discards it"); --force then starts over and publishes the bytes
# of an uninterrupted run. Before the fix, a short raw file was padded with zeros and published.
source "$(dirname "$0")/../cli/lib.sh"
D=$TC_DATA
FILL=(--input "$D/big.h5" --rows 0:6000 --encoder cnn="$D/cnn.pt" --features images --labels labels
      --batch-size 64 --commit-rows 256 --threads 1 --workers 1)

run "$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/ref.h5" -q
expect_rc 0

# A journal with progress: interrupt a run once it has committed some rows (once; each case then
# damages a copy of that partial directory: the journal names no path of its own).
make_partial() {
  local out=$1 c
  if [ -d "$WORK/base.h5.partial" ]; then
    cp -r "$WORK/base.h5.partial" "$out.partial"
    return
  fi
  "$TC_BIN/cache-fill" "${FILL[@]}" --out "$out" 2>/dev/null &
  local pid=$!
  for _ in $(seq 1 1500); do
    c=$(grep -o '"committed_rows": [0-9]*' "$out.partial/journal.json" 2>/dev/null | grep -o '[0-9]*$')
    if [ -n "$c" ] && [ "$c" -ge 1024 ]; then break; fi
    sleep 0.01
  done
  kill -INT "$pid"
  wait "$pid"
  committed=$(grep -o '"committed_rows": [0-9]*' "$out.partial/journal.json" | grep -o '[0-9]*$')
  cp -r "$out.partial" "$WORK/base.h5.partial"
}
edit_journal() {  # edit_journal FILE PYTHON-EXPRESSION-ON-j
  "$TC_PYTHON" -c "
import json, sys
p = sys.argv[1]; j = json.load(open(p)); $2
open(p, 'w').write(json.dumps(j))" "$1"
}
# damaged OUT WHY [force]: refused, nothing published; with `force`, --force then starts over and
# publishes the bytes of an uninterrupted run (checked once for each of the two ways a journal is
# refused: one that does not load, one that does not validate against its raw files and digests).
damaged() {
  run "$TC_BIN/cache-fill" "${FILL[@]}" --out "$1"
  expect_rc 65
  expect_err "cache-fill: error: $1.partial/journal.json: journal damaged: $2; --force discards it"
  expect_no_file "$1"
  [ "${3:-}" = force ] || return 0
  run "$TC_BIN/cache-fill" "${FILL[@]}" --out "$1" --force -q
  expect_rc 0
  expect_same "$1" "$WORK/ref.h5"
}

# The raw file is shorter than the committed rows (32 floats = 128 bytes a row).
make_partial "$WORK/a.h5"
truncate -s 1000 "$WORK/a.h5.partial/cnn.raw"
damaged "$WORK/a.h5" "cnn.raw holds 1000 bytes but $committed committed rows need $((committed * 128))" force

# committed_rows beyond the input's rows.
make_partial "$WORK/b.h5"
edit_journal "$WORK/b.h5.partial/journal.json" "j['committed_rows'] = 99999"
damaged "$WORK/b.h5" "99999 rows committed but the run has only 6000"

# Under --update, which refuses --force, the remedy named is one that works with it: removing the
# progress directory; --update then fills from the start and publishes the same bytes.
make_partial "$WORK/u.h5"
edit_journal "$WORK/u.h5.partial/journal.json" "j['committed_rows'] = 99999"
run "$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/u.h5" --update
expect_rc 65
expect_err "cache-fill: error: $WORK/u.h5.partial/journal.json: journal damaged: 99999 rows committed but the run has only 6000; rm -r $WORK/u.h5.partial discards it (--update then starts this update over)"
expect_no_file "$WORK/u.h5"
rm -r "$WORK/u.h5.partial"
run "$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/u.h5" --update -q
expect_rc 0
expect_same "$WORK/u.h5" "$WORK/ref.h5"

# committed_rows off a batch boundary.
make_partial "$WORK/c.h5"
edit_journal "$WORK/c.h5.partial/journal.json" "j['committed_rows'] = 100"
damaged "$WORK/c.h5" "100 committed rows do not end a batch of this input"

# Wrong types: the same error, naming the file (was a JSON exception and exit 70).
make_partial "$WORK/d.h5"
edit_journal "$WORK/d.h5.partial/journal.json" "j['committed_rows'] = 'many'"
damaged "$WORK/d.h5" "committed_rows is missing or not a non-negative integer"
make_partial "$WORK/e.h5"
edit_journal "$WORK/e.h5.partial/journal.json" "j['encoders']['cnn']['row_shape'] = [32, 'x']"
damaged "$WORK/e.h5" "row_shape of 'cnn' holds a size that is not a positive integer"
make_partial "$WORK/f.h5"
printf '{"format": "traincache-journal", "fingerprint": ' > "$WORK/f.h5.partial/journal.json"
damaged "$WORK/f.h5" "not a JSON object" force

# Rows committed, but the encoder's row shape is missing.
make_partial "$WORK/g.h5"
edit_journal "$WORK/g.h5.partial/journal.json" "del j['encoders']['cnn']"
damaged "$WORK/g.h5" "rows are committed but encoder 'cnn' has no row shape"

# Committed bytes zeroed in place (the size is right): caught by the chunk digests. Before them
# the zeros were resumed and published with exit 0.
make_partial "$WORK/z.h5"
dd if=/dev/zero of="$WORK/z.h5.partial/cnn.raw" bs=128 seek=300 count=1 conv=notrunc status=none
damaged "$WORK/z.h5" "cnn.raw rows 256-511 differ from what was committed (their digest does not match)" force
# A journal whose chunk digests were removed (or an older version's) is not resumed either.
make_partial "$WORK/y.h5"
edit_journal "$WORK/y.h5.partial/journal.json" "del j['encoders']['cnn']['chunks']"
damaged "$WORK/y.h5" "rows of 'cnn' are committed without chunk digests (an older version's journal)"

# A sound journal still resumes to the same bytes.
make_partial "$WORK/h.h5"
run "$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/h.h5"
expect_rc 0
expect_err_has "resumed at $committed"
expect_same "$WORK/h.h5" "$WORK/ref.h5"

# The journal is checked before LibTorch is loaded (plan_encoding, fill/prepare.cpp): with no engines
# module to load, a damaged one is still refused, and a sound one is adopted, its progress kept
# when the module then cannot be loaded.
export TRAINCACHE_ENGINES_MODULE="$WORK/none.so"
make_partial "$WORK/m.h5"
truncate -s 1000 "$WORK/m.h5.partial/cnn.raw"
damaged "$WORK/m.h5" "cnn.raw holds 1000 bytes but $committed committed rows need $((committed * 128))"
rm -r "$WORK/m.h5.partial"
make_partial "$WORK/m.h5"
run "$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/m.h5"
expect_rc 69
expect_err "cache-fill: error: LibTorch: cannot load libtraincache_engines.so: $WORK/none.so: cannot open shared object file: No such file or directory"
expect_same "$WORK/m.h5.partial/journal.json" "$WORK/base.h5.partial/journal.json"
unset TRAINCACHE_ENGINES_MODULE

finish
