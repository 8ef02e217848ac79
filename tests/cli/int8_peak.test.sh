#!/usr/bin/env bash
# int8-peak (make bench's text_precision floors): one figure per kernel the CPU has, null for the
# others (by /proc/cpuinfo's flags, read here on their own), each within what a core can issue;
# the kernels' own sums are checked by the tool (exit 70 otherwise). Usage errors: 64, one line.
source "$(dirname "$0")/lib.sh"

run "$TC_BIN/int8-peak" --threads 2
expect_rc 0
echo "$out" > "$WORK/peak.json"
"$TC_PYTHON" - "$WORK/peak.json" <<'PY' && _ok || _fail "int8-peak's JSON against the CPU's flags"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["threads"] == 2, j
flags = set()
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
has = {"fp32_fma_avx2": {"avx2", "fma"}, "fp32_fma_avx512": {"avx512f"},
       "int8_exact_avx2": {"avx2"}, "int8_vnni": {"avx512f", "avx512bw", "avx512_vnni"}}
lanes = {"fp32_fma_avx2": 8, "fp32_fma_avx512": 16, "int8_exact_avx2": 32, "int8_vnni": 64}
rate = j["gmacs_per_core"]
assert set(rate) == set(has), rate
for k, need in has.items():
    if not need <= flags:
        assert rate[k] is None, (k, rate)
        continue
    # no core issues more than four such instructions a cycle at 6 GHz: a faster figure would be
    # work the compiler left out
    assert 0 < rate[k] <= lanes[k] * 4 * 6, (k, rate)
PY

run "$TC_BIN/int8-peak" --threads 0
expect_rc 64
expect_err "int8-peak: error: --threads: must be a positive integer, got '0' (see --help)"
expect_no_out

finish
