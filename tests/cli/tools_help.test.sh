#!/usr/bin/env bash
# Every tool: --help (stdout, exit 0, EXIT STATUS), --version (git, LibTorch, BLAS), bad flags.
source "$(dirname "$0")/lib.sh"
for tool in cache-fill cache-inspect gc-train shm-cache smart-bench; do
  run "$TC_BIN/$tool" --help
  expect_rc 0
  expect_out_has "Usage: $tool"
  expect_out_has "EXIT STATUS"
  expect_err ""
  run "$TC_BIN/$tool" --version
  expect_rc 0
  expect_out_re "^$tool [0-9]+\.[0-9]+\.[0-9]+ \(git [^)]*\)"
  if [ "$tool" != shm-cache ]; then  # shm-cache does not link LibTorch
    expect_out_has $'\nLibTorch 1.13'
    expect_out_re $'\nBLAS: openblas'
  else
    expect_out_re "^shm-cache [0-9.]+ \(git [^)]*\)$"
  fi
  run "$TC_BIN/$tool" --no-such-flag
  expect_rc 64
  expect_one_line_err
  expect_no_out
done
finish
