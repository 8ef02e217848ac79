#!/usr/bin/env bash
# A full file system while writing: one line on stderr, exit 74, no temporary file left, and what
# was already stored kept intact (cache-fill keeps its journal and resumes once there is room).
# Before the fix cache-fill segfaulted at exit and gc-train aborted with a torch backtrace.
source "$(dirname "$0")/../cli/lib.sh"
D=$TC_DATA
FULL="$WORK/full"
mkdir "$FULL"
if ! { [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=64k tmpfs "$FULL" 2>/dev/null; }; then
  echo "full_disk.test.sh: SKIPPED: mounting a small tmpfs needs root (the /dev/full cases still run)" >&2
  FULL=""
fi
trap '[ -n "$FULL" ] && umount "$FULL"; rm -rf "$WORK"' EXIT
resize() { mount -o remount,size="$1" "$FULL"; }
no_temporaries() { [ -z "$(find "$1" -name '*.tmp')" ] && _ok || _fail "temporary files left: $(find "$1" -name '*.tmp')"; }
FILL=(--input "$D/images.h5" --encoder cnn="$D/cnn.pt" --features images --labels labels --commit-rows 64)
RAW=(--data "$D/pairs.h5" --query q --passage p --encoder "$D/tower.pt" --batch-size 32 --seed 1 -q)

# --metrics on /dev/full: exit 74 (the write error was ignored, exit 0).
run "$TC_BIN/gc-train" "${RAW[@]}" --steps 2 --metrics /dev/full
expect_rc 74
expect_err "gc-train: error: /dev/full: write failed: no space left on device"

if [ -n "$FULL" ]; then
  run "$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/ref.h5" -q
  expect_rc 0

  # cache-fill: the journal fits, the published file does not.
  run "$TC_BIN/cache-fill" "${FILL[@]}" --out "$FULL/c.h5"
  expect_rc 74
  expect_one_line_err
  expect_err_re "^cache-fill: error: $FULL/c.h5: cannot write the file: .*; progress kept in $FULL/c.h5.partial \(run again to resume\)\$"
  expect_no_file "$FULL/c.h5"
  expect_file "$FULL/c.h5.partial/journal.json"
  no_temporaries "$FULL"
  resize 1m
  run "$TC_BIN/cache-fill" "${FILL[@]}" --out "$FULL/c.h5"
  expect_rc 0
  expect_err_has "(0 encoded, resumed at 300)"
  expect_same "$FULL/c.h5" "$WORK/ref.h5"

  # An existing cache stays intact when its replacement cannot be written.
  cp "$FULL/c.h5" "$WORK/before.h5"
  rm -rf "$FULL"/c.h5.partial
  resize 96k
  run "$TC_BIN/cache-fill" "${FILL[@]}" --dtype float16 --out "$FULL/c.h5" --force
  expect_rc 74
  expect_same "$FULL/c.h5" "$WORK/before.h5"
  no_temporaries "$FULL"
  rm -rf "$FULL"/*

  # gc-train: --out and checkpoints that do not fit.
  resize 1m
  run "$TC_BIN/gc-train" "${RAW[@]}" --steps 2 --out "$FULL/head.pt" --checkpoint-dir "$FULL/ck"
  expect_rc 0
  cp "$FULL/head.pt" "$WORK/head.before"
  cp "$FULL/ck/checkpoint.pt" "$WORK/ck.before"
  dd if=/dev/zero of="$FULL/filler" bs=4k count=1000 2>/dev/null  # fills what is left
  run "$TC_BIN/gc-train" "${RAW[@]}" --steps 2 --out "$FULL/head.pt"
  expect_rc 74
  expect_one_line_err
  expect_err "gc-train: error: $FULL/head.pt: write failed: no space left on device"
  expect_same "$FULL/head.pt" "$WORK/head.before"
  run "$TC_BIN/gc-train" "${RAW[@]}" --steps 4 --checkpoint-dir "$FULL/ck" --resume
  expect_rc 74
  expect_one_line_err
  expect_err "gc-train: error: $FULL/ck/checkpoint.pt: write failed: no space left on device"
  expect_same "$FULL/ck/checkpoint.pt" "$WORK/ck.before"
  no_temporaries "$FULL"
fi

finish
