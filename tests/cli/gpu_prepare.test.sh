#!/usr/bin/env bash
# scripts/gpu-prepare's refusals, on a copy of the script in a repository of its own (the real one's
# .gpu/ is never touched): a kit folder that is missing or is not the GPU recipe is exit 66, a recipe
# whose gpu-run.sh it cannot adapt is exit 65, each with one line, before anything is fetched.
source "$(dirname "$0")/lib.sh"
R=$WORK/repo
mkdir -p "$R/scripts" "$R/.git/info" "$WORK/notkit" "$WORK/kit"
cp "$TC_SOURCE/scripts/gpu-prepare" "$TC_SOURCE/scripts/help.sh" "$R/scripts/"
run "$R/scripts/gpu-prepare" "$WORK/nosuch"
expect_rc 66
expect_err "gpu-prepare: error: $WORK/nosuch: no such folder (the shared GPU recipe)"
run "$R/scripts/gpu-prepare" "$WORK/notkit"
expect_rc 66
expect_err "gpu-prepare: error: $WORK/notkit: not the GPU recipe (no fetch-debs.sh or gpu-run.sh)"
printf '#!/bin/sh\nexit 3\n' >"$WORK/kit/fetch-debs.sh"
chmod +x "$WORK/kit/fetch-debs.sh"
printf 'cmake -S . -B "$B" -DTRAINCACHE_BUILD_BENCH=ON\n' >"$WORK/kit/gpu-run.sh"
run "$R/scripts/gpu-prepare" "$WORK/kit"
expect_rc 65
expect_err "gpu-prepare: error: .gpu/gpu-run.sh: no -DTRAINCACHE_BUILD_BENCH=OFF to turn on (has the recipe changed?)"
expect_eq "$(cat "$R/.git/info/exclude")" "/.gpu/" "the copy's .gpu/ ignored by git"
printf 'export DEPS=/opt/deps\ncmake -S . -B "$B" -DTRAINCACHE_BUILD_BENCH=OFF\n' >"$WORK/kit/gpu-run.sh"
run "$R/scripts/gpu-prepare" "$WORK/kit"  # adapted, then the kit's fetch-debs.sh fails (exit 3)
expect_rc 3
expect_eq "$(grep -c -e '-DTRAINCACHE_BUILD_BENCH=ON' -e '^export TRAINCACHE_WORDNET=' "$R/.gpu/gpu-run.sh")" 2 \
  "gpu-run.sh builds the benchmarks and sets WordNet"
finish
