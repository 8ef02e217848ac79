#!/usr/bin/env bash
# Every tool: --help (stdout, exit 0, EXIT STATUS), --version (git, LibTorch, BLAS), bad flags.
source "$(dirname "$0")/lib.sh"
for tool in cache-fill cache-inspect gc-train shm-cache smart-bench; do
  run "$TC_BIN/$tool" --help
  expect_rc 0
  expect_out_has "Usage: $tool"
  expect_out_has "EXIT STATUS"
  expect_out_has $'\nEXAMPLES\n  '"$tool "
  expect_err ""
  help_text=$out
  # Within 100 columns (lines of 291 were seen), with no sentence cut off at the wrap.
  expect_eq "$(printf '%s\n' "$out" | awk 'length > 100' | head -3)" "" "--help lines of $tool over 100 columns"
  run "$TC_BIN/$tool" --version
  expect_rc 0
  expect_out_re "^$tool [0-9]+\.[0-9]+\.[0-9]+ \(git [^)]*\)"
  if [ "$tool" != shm-cache ]; then  # shm-cache does not link LibTorch
    expect_out_re $'\nLibTorch [12]\\.[0-9]+'  # 1.13 on Debian 12, 2.6 on Debian 13, 2.x from pip
    expect_out_re $'\nBLAS: (openblas|mkl \\(linked into LibTorch\\))'  # Debian's; pip's carries MKL
    # oneDNN's linear operator came with LibTorch 2.0 (Debian 13's 2.6 and pip's have it; 1.13 not).
    if printf '%s\n' "$out" | grep -q '^LibTorch 1\.'; then
      expect_out_has $'\nfloat32 linear layers: BLAS\n'
    else
      expect_out_has $'\nfloat32 linear layers: oneDNN (optimised modules on the CPU)\n'
    fi
    if grep -qx '#define TRAINCACHE_WITH_NVJPEG 1' "$TC_BIN/../generated/traincache_nvjpeg_config.h"; then
      expect_out_has $'\nnvJPEG: built in (cache-fill --decode device)\n'
    else
      expect_out_has $'\nnvJPEG: not built in\n'
    fi
  else
    expect_out_re $'^shm-cache [0-9.]+ \\(git [^)]*\\)\nimage SIMD: [^\n]*$'
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
# Exit 75 as the tools use it (the help said only "--merge gave up" and "slab busy").
run "$TC_BIN/cache-fill" --help
expect_out_has "75 another run holds the output, or"
run "$TC_BIN/gc-train" --help
expect_out_has "75 another run holds --checkpoint-dir, or a"
for sub in create fill rm; do
  run "$TC_BIN/shm-cache" $sub --help
  expect_eq "$(printf '%s\n' "$out" | awk 'length > 100' | head -3)" "" "--help lines of shm-cache $sub over 100 columns"
  undocumented=""
  for flag in $(printf '%s\n' "$out" | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
    grep -q -- "$flag" "$TC_SOURCE/docs/shm-cache.md" || undocumented="$undocumented $flag"
  done
  expect_eq "$undocumented" "" "options of shm-cache $sub missing from docs/shm-cache.md"
done
# Every script a user may run answers --help on stdout, exit 0, within 100 columns, and makes
# nothing (demo.sh used to create a directory named "--help/demo"; make-test-fixtures filled one).
mkdir "$WORK/scripts-cwd"
for script in "$TC_SOURCE"/scripts/*; do
  [ -f "$script" ] && [ -x "$script" ] || continue
  name=$(basename "$script")
  run env -C "$WORK/scripts-cwd" COLUMNS=100 "$script" --help
  expect_rc 0
  expect_eq "$([ -n "$out" ] && echo text)" text "scripts/$name --help prints its usage"
  expect_eq "$(printf '%s\n' "$out" | awk 'length > 100' | head -3)" "" "scripts/$name --help over 100 columns"
  expect_eq "$(ls -A "$WORK/scripts-cwd")" "" "files made by scripts/$name --help"
done
# -vv, applied once by the common options for every tool, shows HDF5's own error stack.
run "$TC_BIN/cache-inspect" "$TC_DATA/truncated.h5"
expect_rc 65
expect_one_line_err
run "$TC_BIN/cache-inspect" -vv "$TC_DATA/truncated.h5"
expect_rc 65
expect_err_has "HDF5-DIAG: Error detected in HDF5"
# cache-inspect --verify runs in libtraincache_engines.so, which shares the tool's HDF5 layer (libtraincache_core.so).
tool "$TC_BIN/cache-fill" -q --input "$TC_DATA/images.h5" --features images --labels labels --encoder cnn="$TC_DATA/cnn.pt" \
  --rows 0:16 --out "$WORK/v.h5" || _fail "cache-fill"
run "$TC_BIN/cache-inspect" -vv --verify 2 --input "$TC_DATA/truncated.h5" "$WORK/v.h5"
expect_rc 65
expect_err_has "HDF5-DIAG: Error detected in HDF5"
run "$TC_BIN/smart-bench" --data "$TC_DATA/truncated.h5" --strategy none -vv
expect_rc 65
expect_err_has "HDF5-DIAG: Error detected in HDF5"
# The tools link no LibTorch: they load it with libtraincache_engines.so once their options are
# checked. Where it cannot be loaded, --help and refused command lines (by the parser, or by the
# engines' own option checks) answer as before, and only work for LibTorch is 69, saying why, with
# nothing written.
for tool in cache-fill gc-train smart-bench; do  # cache-inspect: cache_inspect.test.sh
  expect_eq "$(readelf -d "$TC_BIN/$tool" | grep -c 'NEEDED.*lib\(torch\|c10\)')" 0 "LibTorch libraries $tool needs at start"
done
# The image code's vector instructions, and the environment's cap on them (any case; a set this CPU
# lacks leaves it as it is; anything else is refused before work starts, nothing written).
lanes=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -cx 'avx2\|avx512f\|avx512bw\|avx512vl\|avx512dq')
case "$(uname -m):$lanes" in
  x86_64:5) cpu_simd="AVX-512 (16 lanes)" ;;
  x86_64:[1-4]) cpu_simd="AVX2 (8 lanes)" ;;  # (FMA and BMI2 come with AVX2 on every such CPU)
  x86_64:0) cpu_simd="SSE2 (4 lanes)" ;;
  *) cpu_simd="128-bit vectors (4 lanes)" ;;
esac
run "$TC_BIN/shm-cache" --version
expect_eq "$(tail -1 <<<"$out")" "image SIMD: $cpu_simd" "shm-cache --version's last line"
run env TRAINCACHE_MAX_CPU_ISA=Avx512 "$TC_BIN/cache-fill" --version
expect_eq "$(tail -1 <<<"$out")" "image SIMD: $cpu_simd" "cache-fill --version's last line"
if [ "$(uname -m)" = x86_64 ] && [ "$cpu_simd" != "SSE2 (4 lanes)" ]; then
  run env TRAINCACHE_MAX_CPU_ISA=sse2 "$TC_BIN/gc-train" --version
  expect_out_has $'\nimage SIMD: SSE2 (4 lanes); held there by TRAINCACHE_MAX_CPU_ISA=sse2, the CPU has '"$cpu_simd"
fi
run env TRAINCACHE_MAX_CPU_ISA=neon "$TC_BIN/cache-fill" --input "$TC_DATA/images.h5" --features images \
  --encoder "$TC_DATA/cnn.pt" --rows 0:16 --out "$WORK/none.h5"
expect_rc 64
expect_err "cache-fill: error: TRAINCACHE_MAX_CPU_ISA: must be avx512, avx2 or sse2, got 'neon'"
expect_no_file "$WORK/none.h5"

export TRAINCACHE_ENGINES_MODULE="$WORK/none.so"
no_module="LibTorch: cannot load libtraincache_engines.so: $WORK/none.so: cannot open shared object file: No such file or directory"
for tool in cache-fill gc-train smart-bench; do
  run "$TC_BIN/$tool" --help
  expect_rc 0
  expect_out_has "Usage: $tool"
  run "$TC_BIN/$tool" --version
  expect_rc 69
  expect_err "$tool: error: $no_module"
done
run "$TC_BIN/cache-fill" --input "$TC_DATA/images.h5" --features images --encoder cnn=a.pt --encoder cnn=b.pt \
  --out "$WORK/none.h5"
expect_rc 64
expect_err "cache-fill: error: --encoder: encoder name 'cnn' given twice"
run "$TC_BIN/cache-fill" -q --input "$TC_DATA/images.h5" --features images --encoder cnn="$TC_DATA/cnn.pt" \
  --rows 0:16 --out "$WORK/none.h5"
expect_rc 69
expect_err "cache-fill: error: $no_module"
expect_no_file "$WORK/none.h5"
expect_no_file "$WORK/none.h5.partial"  # its journal is opened before LibTorch: an empty one goes
# A fill on the CPU opens its inputs before it loads LibTorch: a missing one is 66, as ever; a
# fill on a CUDA device loads LibTorch first (a device the machine lacks is 69 before any input).
run "$TC_BIN/cache-fill" -q --input "$WORK/missing.h5" --features images --encoder cnn="$TC_DATA/cnn.pt" \
  --out "$WORK/none.h5"
expect_rc 66
expect_err "cache-fill: error: $WORK/missing.h5: no such file or directory"
run "$TC_BIN/cache-fill" -q --input "$WORK/missing.h5" --features images --encoder cnn="$TC_DATA/cnn.pt" \
  --device cuda --out "$WORK/none.h5"
expect_rc 69
expect_err "cache-fill: error: $no_module"
run "$TC_BIN/cache-fill" -q --input "$WORK/missing.h5" --features images --encoder cnn="$TC_DATA/cnn.pt" \
  --device gpu --out "$WORK/none.h5"
expect_rc 64
expect_err "cache-fill: error: --device: expected cpu or cuda[:N], got 'gpu'"
run "$TC_BIN/gc-train" --cache "$WORK/v.h5" --embeddings cnn --resume --steps 1
expect_rc 64
expect_err "gc-train: error: --resume: needs --checkpoint-dir"
run "$TC_BIN/gc-train" -q --cache "$WORK/v.h5" --embeddings cnn --steps 1 --out "$WORK/head.pt"
expect_rc 69
expect_err "gc-train: error: $no_module"
expect_no_file "$WORK/head.pt"
# gc-train reads a cache's description before LibTorch: a cache the run cannot use is refused there.
run "$TC_BIN/gc-train" -q --cache "$WORK/v.h5" --embeddings text --steps 1
expect_rc 65
expect_err "gc-train: error: $WORK/v.h5: no encoder named 'text' in the cache (have: cnn)"
run "$TC_BIN/gc-train" -q --cache "$WORK/v.h5" --embeddings cnn --eval-data "$TC_DATA/foreign.h5" --steps 1
expect_rc 65
expect_err "gc-train: error: $TC_DATA/foreign.h5: not a traincache cache (no format=\"traincache\" attribute)"
run "$TC_BIN/gc-train" -q --cache "$WORK/v.h5" --query-embeddings cnn --passage-embeddings text --steps 1
expect_rc 65
expect_err "gc-train: error: $WORK/v.h5: no encoder named 'text' in the cache (have: cnn)"
# smart-bench checks its options before LibTorch too: what its engine would refuse is refused here.
run "$TC_BIN/smart-bench" --data "$TC_DATA/images.h5" --strategy none,smart --replace-rate 0
expect_rc 64
expect_err "smart-bench: error: --replace-rate: must be in (0, 1]"
run "$TC_BIN/smart-bench" --data "$TC_DATA/images.h5" --strategy embed
expect_rc 64
expect_err "smart-bench: error: --strategy: embed needs --frozen-encoder and --cache"
run "$TC_BIN/smart-bench" --data "$TC_DATA/images.h5" --files "$WORK" --strategy none
expect_rc 64
expect_err "smart-bench: error: --data: give exactly one of --data, --files and --shm"
run "$TC_BIN/smart-bench" --data "$TC_DATA/images.h5" --strategy none --normalize imagenet
expect_rc 64
expect_err_has "smart-bench: error: --normalize: applies to images"
run "$TC_BIN/smart-bench" --data "$TC_DATA/images.h5" --strategy none --epochs 1
expect_rc 69
expect_err "smart-bench: error: $no_module"
# And its source, where that is cheap to tell (check_source): --files' meta.json, an HDF5 dataset.
run "$TC_BIN/smart-bench" --data "$TC_DATA/images.h5" --dataset vec --strategy none --epochs 1
expect_rc 65
expect_err "smart-bench: error: $TC_DATA/images.h5: 'vec' must hold uint8 items or images"
mkdir "$WORK/meta"
echo '{"count": 3, "dims": [-4]}' >"$WORK/meta/meta.json"
run "$TC_BIN/smart-bench" --files "$WORK/meta" --strategy none --epochs 1
expect_rc 65
expect_err "smart-bench: error: $WORK/meta/meta.json: expected {\"count\": N, \"dims\": [positive sizes], \"labels\": [N integers]}"
echo '{"count": 3, "dims": [4]}' >"$WORK/meta/meta.json"
run "$TC_BIN/smart-bench" --files "$WORK/meta" --strategy none --epochs 1
expect_rc 69
expect_err "smart-bench: error: $no_module"
unset TRAINCACHE_ENGINES_MODULE
# LibTorch's OpenMP threads spin 10,000 times and then sleep (set as the module loads) unless the
# user chose: OMP_WAIT_POLICY or GOMP_SPINCOUNT in the environment, either one, is left as it is.
# libgomp reports its settings with OMP_DISPLAY_ENV; an unset policy also shows as 'PASSIVE' there,
# but spins 300000 times before sleeping, so the spin count is what tells.
# The benchmark programs link LibTorch: they start themselves again with the settings (a setenv
# from their .preinit_array never reached libgomp: the spin count stayed 300000).
for tool in cache-fill gc-train fill-bench jpeg-bench; do
  [ -x "$TC_BIN/$tool" ] || continue  # the benchmarks are built unless TRAINCACHE_BUILD_BENCH=OFF
  run env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=verbose "$TC_BIN/$tool" --version
  expect_err_has "GOMP_SPINCOUNT = '10000'"
  run env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active OMP_DISPLAY_ENV=verbose "$TC_BIN/$tool" --version
  expect_err_has "OMP_WAIT_POLICY = 'ACTIVE'"
done
# Either variable alone is the user's choice; one tool for each way the settings are made (the
# module's load, a benchmark program's second start).
for tool in cache-fill fill-bench; do
  [ -x "$TC_BIN/$tool" ] || continue
  run env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=passive OMP_DISPLAY_ENV=verbose "$TC_BIN/$tool" --version
  expect_err_has "GOMP_SPINCOUNT = '0'"
  run env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=300000 OMP_DISPLAY_ENV=verbose "$TC_BIN/$tool" --version
  expect_err_has "GOMP_SPINCOUNT = '300000'"
done
finish
