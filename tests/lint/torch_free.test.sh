#!/usr/bin/env bash
# The torch-free targets include no LibTorch header, directly or through ours; and the check
# itself fails on a tree that does (through a public header that includes an internal one).
set -euo pipefail
: "${TC_SOURCE:?}" "${TC_BUILD:?}"
check="$TC_SOURCE/tests/lint/check-torch-free"
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$check" "$TC_SOURCE" "$TC_BUILD" 2>&1) || fail "the tree is not torch-free: $out"
[[ "$out" =~ ^check-torch-free:\ [0-9]+\ files\ torch-free$ ]] || fail "unexpected output: $out"

# A copy of the headers where one public header leaks torch, and a tool that includes it.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/libcore" "$work/src/tools/x" "$work/build"
cp -r "$TC_SOURCE/libcore/include" "$TC_SOURCE/libcore/torch" "$work/src/libcore/"
echo '#include "traincache/model/encode.h"' >> "$work/src/libcore/include/traincache/base/report.h"
printf '#include "traincache/cli/cli.h"\n#include <ATen/ATen.h>\nint main() {}\n' > "$work/src/tools/x/main.cpp"
printf '[{"file": "%s", "command": "c++ -c main.cpp", "output": "tools/CMakeFiles/x.dir/x/main.cpp.o"}]\n' \
  "$work/src/tools/x/main.cpp" > "$work/build/compile_commands.json"
rc=0
err=$("$check" "$work/src" "$work/build" 2>&1) || rc=$?
[[ $rc == 1 ]] || fail "leaks not detected (rc $rc): $err"
grep -qF 'tools/x/main.cpp includes <ATen/ATen.h>' <<<"$err" || fail "direct include not named: $err"
grep -qF 'tools/x/main.cpp -> libcore/include/traincache/cli/cli.h -> libcore/include/traincache/base/report.h includes internal torch header "traincache/model/encode.h"' <<<"$err" \
  || fail "indirect include not named: $err"
echo "ok"
