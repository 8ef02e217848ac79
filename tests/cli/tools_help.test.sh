#!/usr/bin/env bash
# Every tool: --help (stdout, exit 0, EXIT STATUS), --version (git, LibTorch, BLAS), bad flags.
source "$(dirname "$0")/lib.sh"
for tool in cache-fill cache-inspect gc-train shm-cache smart-bench; do
  run "$TC_BIN/$tool" --help
  expect_rc 0
  expect_out_has "Usage: $tool"
  expect_out_has "EXIT STATUS"
  expect_err ""
  help_text=$out
  run "$TC_BIN/$tool" --version
  expect_rc 0
  expect_out_re "^$tool [0-9]+\.[0-9]+\.[0-9]+ \(git [^)]*\)"
  if [ "$tool" != shm-cache ]; then  # shm-cache does not link LibTorch
    expect_out_has $'\nLibTorch 1.13'
    expect_out_re $'\nBLAS: openblas'
  else
    expect_out_re "^shm-cache [0-9.]+ \(git [^)]*\)$"
  fi
  # Every long option --help lists is documented on the tool's page.
  undocumented=""
  for flag in $(printf '%s\n' "$help_text" | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
    grep -q -- "$flag" "$TC_SOURCE/docs/$tool.md" || undocumented="$undocumented $flag"
  done
  expect_eq "$undocumented" "" "options of $tool missing from docs/$tool.md"
  run "$TC_BIN/$tool" --no-such-flag
  expect_rc 64
  expect_one_line_err
  expect_no_out
  run "$TC_BIN/$tool" --jsno
  expect_rc 64
  expect_err_re "^$tool: error: .*; did you mean --json\? \(see --help\)\$"
done
for sub in create fill rm; do
  run "$TC_BIN/shm-cache" $sub --help
  undocumented=""
  for flag in $(printf '%s\n' "$out" | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
    grep -q -- "$flag" "$TC_SOURCE/docs/shm-cache.md" || undocumented="$undocumented $flag"
  done
  expect_eq "$undocumented" "" "options of shm-cache $sub missing from docs/shm-cache.md"
done
# -vv, applied once by the common options for every tool, shows HDF5's own error stack.
run "$TC_BIN/cache-inspect" "$TC_DATA/truncated.h5"
expect_rc 65
expect_one_line_err
run "$TC_BIN/cache-inspect" -vv "$TC_DATA/truncated.h5"
expect_rc 65
expect_err_has "HDF5-DIAG: Error detected in HDF5"
run "$TC_BIN/smart-bench" --data "$TC_DATA/truncated.h5" --strategy none -vv
expect_rc 65
expect_err_has "HDF5-DIAG: Error detected in HDF5"
finish
