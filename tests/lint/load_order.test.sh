#!/usr/bin/env bash
# scripts/load-order and its use (docs/design.md, "Loading LibTorch"): on a hand-made graph of
# libraries it prints each after what it needs and leaves out the root's own folder; the build's
# libtraincache_engines.so.load-order (and libtraincache_cuda.so's, with a CUDA LibTorch) holds the
# module's whole closure (as ldd resolves it) less our own libraries, each after the libraries it
# names as NEEDED; with a CUDA LibTorch the engines module needs none of CUDA's libraries and a fill
# on the CPU loads none; and a tool loads LibTorch from that list before the module, while a module
# with no list beside it loads LibTorch itself.
set -euo pipefail
: "${TC_SOURCE:?}" "${TC_BUILD:?}"
order="$TC_SOURCE/scripts/load-order"
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- a hand-made graph: root needs x (then z) and own; x needs y; y needs z. own sits in root's
# folder, so it is ours and left out. Depth first: z, y, x.
mkdir -p "$work/deps" "$work/root"
lib() { # lib DIR NAME NEEDED...: DIR/libNAME.so needing libNEEDED.so from deps/ (RUNPATH)
  local dir=$1 name=$2 args=()
  shift 2
  for n in "$@"; do args+=("-l$n"); done
  printf 'int f_%s(void) { return 1; }\n' "$name" >"$work/$name.c"
  cc -shared -fPIC -o "$dir/lib$name.so" "$work/$name.c" -Wl,--no-as-needed -L"$work/deps" -L"$work/root" \
    -Wl,-rpath,"$work/deps:$work/root" "${args[@]}"
}
lib "$work/deps" z
lib "$work/deps" y z
lib "$work/deps" x y
lib "$work/root" own
lib "$work/root" root x z own
"$order" "$work/root/libroot.so" >"$work/small" || fail "load-order failed on the hand-made graph"
grep -q -E "/libc\.so\.6$" "$work/small" || fail "libc missing: $(cat "$work/small")"
ours=$(grep -E "^$work/deps/" "$work/small" | sed 's|.*/||' | tr '\n' ' ')
[ "$ours" = "libz.so liby.so libx.so " ] || fail "hand-made graph in the order '$ours', expected z, y, x"
! grep -q -E "/lib(own|root)\.so$" "$work/small" || fail "the root's own folder was listed"
# With OUT: the same, written whole, and nothing else left in the folder.
"$order" "$work/root/libroot.so" "$work/out/list" 2>/dev/null && fail "OUT in a missing folder passed"
mkdir "$work/out"
"$order" "$work/root/libroot.so" "$work/out/list" || fail "load-order LIBRARY OUT failed"
cmp -s "$work/small" "$work/out/list" || fail "OUT differs from stdout"
[ "$(ls -A "$work/out")" = list ] || fail "left behind: $(ls -A "$work/out")"
rc=0
err=$("$order" "$work/missing.so" 2>&1 >/dev/null) || rc=$?
[ "$rc" = 1 ] && [[ "$err" == *"load-order: error: $work/missing.so: ldd failed" ]] || fail "missing: rc $rc, $err"
rc=0
"$order" 2>/dev/null || rc=$?
[ "$rc" = 64 ] || fail "no argument: rc $rc, expected 64"

# ---- the build's lists: each module's closure less our own, each library after what it needs.
check_list() { # check_list MODULE: MODULE.load-order against ldd's closure and the NEEDED entries
  local module=$1 list="$1.load-order" n=0 file soname at
  [ -s "$list" ] || fail "$list is missing or empty"
  ldd "$module" | awk '$2 == "=>" && $3 ~ /^\// && $1 !~ /^libtraincache/ {print $3}' | sort >"$work/closure"
  sort "$list" >"$work/listed"
  diff "$work/closure" "$work/listed" >"$work/diff" || fail "$list is not the module's closure: $(head -5 "$work/diff")"
  declare -A path_of line_of_path
  while read -r soname file; do path_of[$soname]=$file; done < <(ldd "$module" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
  while read -r file; do line_of_path[$file]=$((n += 1)); done <"$list"
  n=0
  while read -r file; do
    n=$((n + 1))
    for soname in $(readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'); do
      at=${line_of_path[${path_of[$soname]:-none}]:-}
      [ -z "$at" ] || [ "$at" -lt "$n" ] || fail "$file (line $n) comes before ${path_of[$soname]} (line $at), which it needs"
    done
  done <"$list"
  echo "ok: $n libraries in load order for $(basename "$module")"
}
engines="$TC_BUILD/lib/libtraincache_engines.so"
cuda="$TC_BUILD/lib/libtraincache_cuda.so"
check_list "$engines"
[ ! -e "$cuda" ] || check_list "$cuda"

# ---- with a CUDA LibTorch, the engines module links no CUDA library (libtraincache_cuda.so holds
# what needs them), and a run on the CPU loads none: LibTorch's CPU libraries alone.
if [ -e "$cuda" ]; then
  cuda_needed=$(readelf -d "$engines" | grep -E "NEEDED.*\[lib(torch_cuda|c10_cuda|torch|nvjpeg|cudnn|nccl)[.]" || true)
  [ -z "$cuda_needed" ] || fail "the engines module needs CUDA's libraries: $cuda_needed"
  grep -q "/libtorch_cuda[.]so$" "$cuda.load-order" || fail "libtorch_cuda is not in the CUDA module's list"
  # A CUDA module that cannot load: --version still answers, and its CUDA line says why.
  line=$(TRAINCACHE_CUDA_MODULE="$work/none.so" "$TC_BUILD/bin/cache-fill" --version | grep "^CUDA: ") ||
    fail "--version failed without its CUDA module"
  [[ "$line" == "CUDA: not available (cannot load libtraincache_cuda.so: $work/none.so: "* ]] ||
    fail "--version without its CUDA module: '$line'"
  # and a fill on a CUDA device is refused (69, one line saying why), leaving nothing at --out
  if [ -n "${TC_DATA:-}" ]; then
    rc=0
    err=$(TRAINCACHE_CUDA_MODULE="$work/none.so" "$TC_BUILD/bin/cache-fill" -q --input "$TC_DATA/images.h5" \
      --encoder mlp="$TC_DATA/mlp.pt" --features vec --out "$work/cuda.h5" --device cuda 2>&1 >/dev/null) || rc=$?
    [ "$rc" = 69 ] && [[ "$err" == "cache-fill: error: CUDA: cannot load libtraincache_cuda.so: $work/none.so: "* ]] ||
      fail "a CUDA fill without its CUDA module: rc $rc, '$err'"
    [ -z "$(ls "$work" | grep "^cuda[.]h5")" ] || fail "a refused CUDA fill left $(ls "$work" | grep "^cuda")"
  fi
fi
if [ -n "${TC_DATA:-}" ]; then
  loaded=$(env -u LD_DEBUG_OUTPUT LD_DEBUG=files "$TC_BUILD/bin/cache-fill" -q --input "$TC_DATA/images.h5" \
    --encoder mlp="$TC_DATA/mlp.pt" --features vec --out "$work/cpu.h5" 2>&1 >/dev/null | grep -E "file=.*\[0\]; +(needed|dynamically)" || true)
  [ -s "$work/cpu.h5" ] || fail "the CPU fill wrote no cache"
  grep -q "libtorch_cpu" <<<"$loaded" || fail "the CPU fill's report names no libtorch_cpu: LD_DEBUG saw nothing?"
  ! grep -E "lib(torch_cuda|c10_cuda|cudnn|nccl|nvjpeg|traincache_cuda)[.]" <<<"$loaded" >"$work/cuda_loads" ||
    fail "a fill on the CPU loaded CUDA's libraries: $(head -2 "$work/cuda_loads")"
fi

# ---- a tool loads LibTorch from the list, one dlopen of ours each, before the module.
loads() { # loads ENV...: who loaded libtorch_cpu first in cache-fill --version (LD_DEBUG's line)
  env -u LD_DEBUG_OUTPUT LD_DEBUG=files "$@" "$TC_BUILD/bin/cache-fill" --version 2>&1 >/dev/null |
    grep -m1 -E "file=[^ ]*libtorch_cpu[^ ]* \[0\]; +(needed|dynamically)" || true
}
got=$(loads)
[[ "$got" == *"libtorch_cpu"*"dynamically loaded by "*"/libtraincache_core.so [0]"* ]] ||
  fail "LibTorch was not loaded from the list: ${got:-no load reported}"
mkdir "$work/module"
cp "$engines" "$work/module/"
# --version loads the CUDA module first where there is one (its CUDA line); a missing one leaves
# the engines module to load LibTorch (the line then says CUDA is not available, and why).
got=$(loads TRAINCACHE_ENGINES_MODULE="$work/module/libtraincache_engines.so" TRAINCACHE_CUDA_MODULE="$work/none.so")
[[ "$got" == *"libtorch_cpu"*"needed by $work/module/libtraincache_engines.so [0]"* ]] ||
  fail "without a list, LibTorch was not loaded by the module: ${got:-no load reported}"
echo "ok: a tool loads LibTorch from the list"
