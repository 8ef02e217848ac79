#!/usr/bin/env bash
# scripts/option-path (docs/design.md, "How far cache-fill's options travel") counts what it says
# on call graphs whose walk is known: the entry calls run_fill (fill/fill.cpp), which calls into
# io/source, back in fill/fill.cpp a helper of base/error.h, then a wrapper of model/encode.h
# instantiated for its lambda, which calls io/h5. Compiling the real tree takes minutes; this
# checks the walk and the counts.
set -euo pipefail
: "${TC_SOURCE:?}"
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
T=/nonexistent/tree/libcore
node() { printf 'node: { title: "%s" label: "%s\\n%s:%s:1" }\n' "$1" "$2" "$3" "$4"; }
edge() { printf 'edge: { sourcename: "%s" targetname: "%s" label: "%s:%s:%s" }\n' "$1" "$2" "$3" "$4" "$5"; }
{
  echo 'graph: { title: "fill_module.cpp"'
  node tc_fill_run "void tc_fill_run(const FillOptions*)" "$T/src/fill/fill_module.cpp" 3
  node "x:_Z8run_fillv" "void run_fill()" "$T/src/fill/fill.cpp" 10
  edge tc_fill_run "x:_Z8run_fillv" "$T/src/fill/fill_module.cpp" 4 3
  echo '}'
  echo 'graph: { title: "fill.cpp"'
  node "y:_Z8run_fillv" "void run_fill()" "$T/src/fill/fill.cpp" 10
  node "y:_Z4openv" "void open()" "$T/src/io/source.cpp" 5
  node "y:_Z4failv" "void fail()" "$T/include/traincache/base/error.h" 7
  node "y:_Z4wrapv" "void wrap(F&&) [with F = run_fill()::<lambda()>]" "$T/torch/traincache/model/encode.h" 9
  node "y:_Z4lambv" "run_fill()::<lambda()>" "$T/src/fill/fill.cpp" 12
  node "y:_Z4readv" "void read()" "$T/src/io/h5.cpp" 20
  node "y:_Z6helperv" "void helper()" "$T/src/fill/fill.cpp" 30
  node "y:_Z3stdv" "void std::sort()" "/usr/include/c++/12/bits/stl_algo.h" 1
  # Out of order on purpose: the walk follows call sites by line.
  edge "y:_Z8run_fillv" "y:_Z4wrapv" "$T/src/fill/fill.cpp" 14 3
  edge "y:_Z8run_fillv" "y:_Z4openv" "$T/src/fill/fill.cpp" 11 3
  edge "y:_Z8run_fillv" "y:_Z4failv.constprop.0" "$T/src/fill/fill.cpp" 12 3
  edge "y:_Z8run_fillv" "y:_Z3stdv" "$T/src/fill/fill.cpp" 13 3
  edge "y:_Z3stdv" "y:_Z6helperv" "/usr/include/c++/12/bits/stl_algo.h" 2 3
  edge "y:_Z4wrapv" "y:_Z4lambv" "$T/torch/traincache/model/encode.h" 10 3
  edge "y:_Z4lambv" "y:_Z4readv" "$T/src/fill/fill.cpp" 13 3
  edge "y:_Z4openv" "y:_Z4readv" "$T/src/io/source.cpp" 6 3
  edge "y:_Z4openv" "__indirect_call" "$T/src/io/source.cpp" 7 3
  echo '}'
} >"$work/a.ci"
graphs=$work
count() {
  /usr/bin/python3 "$TC_SOURCE/scripts/option-path" --tree /nonexistent/tree --graphs "$graphs" --entry tc_fill_run --json "$@" |
    /usr/bin/python3 -c 'import json, sys; r = json.load(sys.stdin)
print(r["files"], r["climbs"], r["revisits"], r["functions"], r["indirect_call_sites"], " ".join(r["file_list"]))'
}
# The walk, by file: fill_module fill io/source io/h5 io/source fill base/error fill (std::sort:
# not counted, walked through to helper, in fill) model/encode fill (the lambda; io/h5 was walked
# already) model/encode fill fill_module. Climbs (a step to a higher folder): io/source->fill,
# base/error->fill, model/encode->fill twice: 4. Revisits: io/source, then fill, fill,
# model/encode->fill, fill->model/encode, fill, fill_module: 7.
got=$(count)
want="6 4 7 8 1 base/error fill/fill fill/fill_module io/h5 io/source model/encode"
[[ $got == "$want" ]] || fail "whole walk: got '$got', want '$want'"
# Without base/: fill's two visits around base/error are one step.
got=$(count --ignore base)
want="5 3 6 8 1 fill/fill fill/fill_module io/h5 io/source model/encode"
[[ $got == "$want" ]] || fail "--ignore base: got '$got', want '$want'"
# Within fill/: io/source is counted where it is called but not followed (neither into io/h5 nor
# past its indirect call site); the lambda behind model/encode's wrapper is, and meets io/h5 there:
# fill_module fill io/source fill model/encode fill io/h5 fill model/encode fill fill_module.
got=$(count --ignore base --within fill)
want="5 4 6 8 0 fill/fill fill/fill_module io/h5 io/source model/encode"
[[ $got == "$want" ]] || fail "--within fill: got '$got', want '$want'"
# --receives follows the options themselves: run_fill and its lambda take them, plan takes the
# FillRun that holds them, open takes what was resolved from them and read nothing. Entered:
# fill_module fill (run_fill, then its lambda) fill_module; with FillRun also fill/prepare.
mkdir "$work/receives"
{
  echo 'graph: { title: "fill.cpp"'
  node tc_fill_run "void tc_fill_run(const FillOptions*)" "$T/src/fill/fill_module.cpp" 3
  node "z:_Z8run_fillv" "void run_fill(const FillOptions&)" "$T/src/fill/fill.cpp" 10
  node "z:_Z4openv" "FillOptions open(const InputSource&)" "$T/src/io/source.cpp" 5
  node "z:_Z4planv" "void plan(FillRun&)" "$T/src/fill/prepare.cpp" 7
  node "z:_Z6helperv" "void helper(int)" "$T/include/traincache/base/error.h" 7
  node "z:_Z4lambv" "run_fill(const FillOptions&)::<lambda()>" "$T/src/fill/fill.cpp" 12
  node "z:_Z4readv" "void read()" "$T/src/io/h5.cpp" 20
  edge tc_fill_run "z:_Z8run_fillv" "$T/src/fill/fill_module.cpp" 4 3
  edge "z:_Z8run_fillv" "z:_Z4openv" "$T/src/fill/fill.cpp" 11 3
  edge "z:_Z8run_fillv" "z:_Z4planv" "$T/src/fill/fill.cpp" 12 3
  edge "z:_Z8run_fillv" "z:_Z4lambv" "$T/src/fill/fill.cpp" 13 3
  edge "z:_Z4planv" "z:_Z6helperv" "$T/src/fill/prepare.cpp" 8 3
  edge "z:_Z4lambv" "z:_Z4readv" "$T/src/fill/fill.cpp" 13 3
  echo '}'
} >"$work/receives/a.ci"
graphs=$work/receives
got=$(count --receives FillOptions)
want="2 0 1 3 0 fill/fill fill/fill_module"
[[ $got == "$want" ]] || fail "--receives FillOptions: got '$got', want '$want'"
got=$(count --receives FillOptions --receives FillRun)
want="3 0 2 4 0 fill/fill fill/fill_module fill/prepare"
[[ $got == "$want" ]] || fail "--receives FillOptions FillRun: got '$got', want '$want'"
echo "ok"
