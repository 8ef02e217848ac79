#!/usr/bin/env bash
# libcore's folders include only the folders below them (docs/code-map.md); and the check itself
# fails on a tree where one does not (an upward include, one engine including another, a folder
# it does not know).
set -euo pipefail
: "${TC_SOURCE:?}"
check="$TC_SOURCE/tests/lint/check-layers"
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$check" "$TC_SOURCE" 2>&1) || fail "an include points up: $out"
[[ "$out" =~ ^check-layers:\ [0-9]+\ files,\ every\ include\ points\ down$ ]] || fail "unexpected output: $out"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/libcore"
cp -r "$TC_SOURCE/libcore/src" "$TC_SOURCE/libcore/include" "$TC_SOURCE/libcore/torch" "$work/libcore/"
echo '#include "traincache/cli/cli.h"' >> "$work/libcore/src/io/image.cpp"
echo '#include "traincache/train/train.h"' >> "$work/libcore/include/traincache/fill/fill.h"
mkdir "$work/libcore/src/misc" && echo 'int x;' > "$work/libcore/src/misc/x.cpp"
rc=0
err=$("$check" "$work" 2>&1) || rc=$?
[[ $rc == 1 ]] || fail "violations not detected (rc $rc): $err"
for want in \
  "check-layers: error: libcore/src/io/image.cpp includes traincache/cli/cli.h: io/ is below cli/" \
  "check-layers: error: libcore/include/traincache/fill/fill.h includes traincache/train/train.h: one engine includes another" \
  "check-layers: error: libcore/src/misc: a folder check-layers does not know (add it to LAYERS)"; do
  grep -qxF "$want" <<<"$err" || fail "not reported: $want; got: $err"
done
[[ $(wc -l <<<"$err") == 3 ]] || fail "expected exactly three errors: $err"
echo "ok"
