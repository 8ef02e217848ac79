#!/usr/bin/env bash
# OpenMP settings a scheduler or a user sets (issue 84, item 5): OMP_THREAD_LIMIT=1 (Slurm sets such
# limits), OMP_DYNAMIC=true, OMP_MAX_ACTIVE_LEVELS=0 and OMP_NUM_THREADS=1 with OMP_THREAD_LIMIT=1
# hung cache-fill for ever (OpenBLAS waited for threads the tools asked LibTorch for past the limit).
# Each now finishes with the rows of a run without them; gc-train and smart-bench too. Every run is
# a process of its own (the tool server runs a tool itself when the OpenMP variables differ) under
# `timeout`: a hang is exit 124, not a stuck suite.
source "$(dirname "$0")/../cli/lib.sh"
D=$TC_DATA
T="timeout 60"
FILL=(--input "$D/images.h5" --features images --labels labels --encoder cnn="$D/cnn.pt" --batch-size 64 -q)

run "$TC_BIN/cache-fill" "${FILL[@]}" --threads 1 --out "$WORK/ref.h5"
expect_rc 0
n=0
for vars in "OMP_THREAD_LIMIT=1" "OMP_DYNAMIC=true" "OMP_MAX_ACTIVE_LEVELS=0" "OMP_NUM_THREADS=1 OMP_THREAD_LIMIT=1"; do
  n=$((n + 1))
  run env $vars $T "$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/o$n.h5"
  expect_rc 0
  expect_err ""
  # One thread, as the limit allows: the rows of a --threads 1 run, to the bit.
  py "
import h5py, numpy as np
a, b = h5py.File('$WORK/o$n.h5', 'r'), h5py.File('$WORK/ref.h5', 'r')
print(np.array_equal(a['embeddings/cnn'][()], b['embeddings/cnn'][()]))"
  expect_out "True"
done
# An explicit --threads past the limit is held to it too.
run env OMP_THREAD_LIMIT=1 $T "$TC_BIN/cache-fill" "${FILL[@]}" --threads 2 --out "$WORK/t2.h5"
expect_rc 0
run env OMP_THREAD_LIMIT=1 $T "$TC_BIN/gc-train" --cache "$WORK/ref.h5" --embeddings cnn --head linear:8 \
  --batch-size 64 --chunk-size 16 --steps 3 --out "$WORK/head.pt" -q
expect_rc 0
expect_file "$WORK/head.pt"
run env OMP_DYNAMIC=true $T "$TC_BIN/smart-bench" --data "$D/images.h5" --strategy none --epochs 1 -b 50 -q
expect_rc 0

# GOMP_CPU_AFFINITY naming CPUs the process may not run on (item 17): libgomp could not start its
# threads there and ended the tool with 1 (the code --verify uses for "stale") or a crash, leaving
# the output's lock and journal: now 69 before LibTorch loads, with nothing left behind.
msg_re="GOMP_CPU_AFFINITY: names CPU 1000, which this process may not run on \(its CPUs: [0-9 ]+\); LibTorch's OpenMP threads could not start there: name CPUs of those, or unset it$"
run env GOMP_CPU_AFFINITY=1000-1002 $T "$TC_BIN/cache-fill" "${FILL[@]}" --out "$WORK/aff.h5"
expect_rc 69
expect_err_re "^cache-fill: error: $msg_re"
expect_no_file "$WORK/aff.h5"
expect_no_file "$WORK/aff.h5.partial"
expect_no_file "$WORK/aff.h5.lock"
run env GOMP_CPU_AFFINITY=1000-1002 $T "$TC_BIN/cache-inspect" --verify 2 "$WORK/ref.h5"
expect_rc 69
expect_err_re "^cache-inspect: error: $msg_re"
run env GOMP_CPU_AFFINITY=1000 $T "$TC_BIN/gc-train" --cache "$WORK/ref.h5" --embeddings cnn --head linear:8 \
  --batch-size 64 --chunk-size 16 --steps 3 --out "$WORK/aff.pt" -q
expect_rc 69
expect_err_re "^gc-train: error: $msg_re"
expect_no_file "$WORK/aff.pt"
finish
