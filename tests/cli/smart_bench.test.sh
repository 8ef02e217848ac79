#!/usr/bin/env bash
# smart-bench: strategies, output formats from one field list, the CI regression gate, errors.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
export TRAINCACHE_SHM_PREFIX="tcsb-$$-"
trap 'rm -f /dev/shm/"$TRAINCACHE_SHM_PREFIX"* /dev/shm/traincache-smart-bench-*; rm -rf "$WORK"' EXIT
SB=("$TC_BIN/smart-bench" --data "$D/images.h5" --labels labels --epochs 2 -b 32 --model-ms 0.2
    --cache-num 100 --replace-rate 0.2 --cache-fraction 0.5)

run "${SB[@]}" --json
expect_rc 0
echo "$out" > "$WORK/run.json"
py "
import json
d = json.load(open('$WORK/run.json'))
recs = d['records']
by = {(r['strategy'], r['epoch']): r for r in recs}
print(d['schema'], len(recs), sorted(d['samples_per_second']), list(recs[0])[:5],
      by[('none', 2)]['hit_rate'], by[('full', 1)]['hit_rate'], by[('full', 2)]['hit_rate'],
      by[('stochastic', 2)]['hit_rate'], by[('smart', 2)]['samples'], by[('smart', 2)]['hit_rate'],
      by[('full', 2)]['bytes_cached'], by[('stochastic', 2)]['bytes_cached'])
"
# 300 items of [1,28,28] float32 = 3136 bytes each; stochastic caches the first 150.
expect_out "smart-bench/1 8 ['full', 'none', 'smart', 'stochastic'] ['strategy', 'epoch', 'samples', 'wall_seconds', 'samples_per_second'] 0.0 0.0 1.0 0.5 100 1.0 940800 470400"
# scripts/plot-bench draws it: legend entries carry each strategy's samples per epoch (smart's
# window is smaller), the title names the source file, not its path.
cat >"$WORK/spy.py" <<'PY'
import runpy, sys
import matplotlib.pyplot as plt
script, sys.argv = sys.argv[1], sys.argv[1:]
saved = plt.Figure.savefig
def spy(fig, *a, **k):
    ax = fig.axes[0]
    print(ax.get_title().splitlines()[0], [t.get_text() for t in ax.get_legend().get_texts()],
          [t.get_text() for t in ax.get_yticklabels() if t.get_text()][:2])
    return saved(fig, *a, **k)
plt.Figure.savefig = spy
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as e:
    sys.exit(e.code)
PY
run "$TC_PYTHON" "$WORK/spy.py" "$TC_SOURCE/scripts/plot-bench" "$WORK/run.json" "$WORK/run.png"
expect_rc 0
expect_out_re "^smart-bench: samples/s per strategy and epoch \(images.h5\) \['none \(300 samples/epoch\)', 'full \(300 samples/epoch\)', 'stochastic \(300 samples/epoch\)', 'smart \(100 samples/epoch\)'\] \['[0-9,]+', '[0-9,]+'\]$"
expect_file "$WORK/run.png"

# 73: the stochastic slab cannot be created. Its name carries smart-bench's pid; exec keeps the
# pid of the shell that made a slab of that name first. The other slab is left alone.
run bash -c 'S=$1; shift; "$S" create "smart-bench-stochastic-$$" --len 4 --dims 1 --slots 4 -q && echo $$ && exec "$@"' _ \
  "$TC_BIN/shm-cache" "$TC_BIN/smart-bench" --data "$D/images.h5" --strategy stochastic --epochs 1 -b 50 --model-ms 0
expect_rc 73
expect_err "smart-bench: error: smart-bench-stochastic-$out: a slab with this name exists"
expect_file "/dev/shm/${TRAINCACHE_SHM_PREFIX}smart-bench-stochastic-$out"

# --model goes through the encoder loader: missing 66, not TorchScript 65, a model that rejects the
# batch one readable line (65). All three were "internal error" (70) or a torch backtrace before.
run "$TC_BIN/smart-bench" --data "$D/images.h5" --strategy none --epochs 1 -b 50 --model "$WORK/nope.pt"
expect_rc 66
expect_err "smart-bench: error: $WORK/nope.pt: no such file or directory"
run "$TC_BIN/smart-bench" --data "$D/images.h5" --strategy none --epochs 1 -b 50 --model "$D/not-torchscript.pt"
expect_rc 65
expect_err "smart-bench: error: $D/not-torchscript.pt: cannot load TorchScript module: PytorchStreamReader failed reading zip archive: failed finding central directory"
run "$TC_BIN/smart-bench" --data "$D/images.h5" --strategy none --epochs 1 -b 50 --model "$D/mlp.pt"
expect_rc 65
# (LibTorch 2.15 names the operation: "addmm: mat1 and mat2 ..."; the hint names the flags that set
# the images' shape, which smart-bench shares with cache-fill.)
expect_err_re "^smart-bench: error: $D/mlp\.pt: rejected the input \(\[50, 1, 28, 28\] float32\): RuntimeError: (addmm: )?mat1 and mat2 shapes cannot be multiplied \(1400x28 and 16x32\) \(the images' shape comes from --channels, --resize and --center-crop: give the ones the model was trained with\)$"

# A TorchScript model's training step, resized inputs, files as the source; JSON Lines as records finish.
"$TC_PYTHON" "$TC_SOURCE/scripts/h5-to-files" "$D/images.h5" "$WORK/files" --items 120 2>/dev/null
run "$TC_BIN/smart-bench" --files "$WORK/files" --strategy none,full --epochs 2 -b 40 --model "$D/cnn.pt" \
  --resize 28,28 --jsonl
expect_rc 0
expect_eq "$(printf '%s\n' "$out" | wc -l)" "4" "one line per strategy and epoch"
expect_out_re '^\{"strategy":"none","epoch":1,"samples":120,'

run "$TC_BIN/smart-bench" --data "$D/images.h5" --strategy none --epochs 1 -b 50 --model-ms 0 --csv
expect_rc 0
expect_out_re '^strategy,epoch,samples,wall_seconds,samples_per_second,step_ms_mean,step_ms_p50,step_ms_p95,data_wait_seconds,model_idle_fraction,hit_rate,bytes_cached,peak_rss_bytes,boundary_blocked_seconds,cpu_seconds,samples_per_cpu_second
none,1,300,'

run "$TC_BIN/smart-bench" --data "$D/images.h5" --strategy full --epochs 2 -b 50 --model-ms 0
expect_rc 0
expect_out_re '^     strategy epoch  samples   wall s  samples/s'

# The gate: exit 1 against a baseline far faster than this run, 0 against a far slower one.
py "
import json
d = json.load(open('$WORK/run.json'))
for name, k in (('fast', 1000.0), ('slow', 0.001)):
    e = dict(d); e['records'] = [dict(r, samples_per_second=r['samples_per_second'] * k,
                                      samples_per_cpu_second=r['samples_per_cpu_second'] * k) for r in d['records']]
    json.dump(e, open('$WORK/%s.json' % name, 'w'))
"
run "${SB[@]}" --strategy none,full --baseline "$WORK/fast.json"
expect_rc 1
expect_err_re "smart-bench: regression: full: [0-9.]+ -> [0-9.]+ samples(/s| per CPU-second) \(-[0-9.]+%, limit -10.0%; epochs vary by [0-9.]+% now, [0-9.]+% in the baseline\)"
run "${SB[@]}" --strategy none,full --baseline "$WORK/slow.json" -q
expect_rc 0
expect_err ""
# What the gate compared: samples per CPU-second exactly when other processes held the cores in
# this run (its contention, in --json) and the baseline records it; samples/s otherwise.
run "${SB[@]}" --strategy none,full --baseline "$WORK/slow.json" --json -q --epochs 4 --compare-anyway
expect_rc 0
echo "$out" >"$WORK/gate.json"
py "
import json
d = json.load(open('$WORK/gate.json'))
c = d['contention']
busy = c is not None and c['competed']
print(d['gate_measure'] == ('samples_per_cpu_second' if busy else 'samples_per_second'),
      all(r['cpu_seconds'] > 0 and r['samples_per_cpu_second'] > 0 for r in d['records']))
# The gate's figures: each strategy's median over epochs 2.. (the records say what it is), now and in
# the baseline (the records times 0.001), their noise, the change.
m = d['gate_measure']
def med(v):
    v = sorted(v); n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
b = json.load(open('$WORK/slow.json'))['records']
for g in d['gate']:
    now = [r[m] for r in d['records'] if r['strategy'] == g['strategy'] and r['epoch'] > 1]
    was = [r[m] for r in b if r['strategy'] == g['strategy'] and r['epoch'] > 1]
    dev = med([abs(x - med(now)) for x in now]) / med(now)
    t = d['throughput'][m][g['strategy']]
    print(g['strategy'], abs(g['after'] / med(now) - 1) < 1e-9, abs(g['before'] / med(was) - 1) < 1e-9,
          abs(g['noise_after'] - dev) < 1e-9, abs(t['median'] / med(now) - 1) < 1e-9, t['epochs'] == len(now),
          abs(g['change'] - (g['after'] / g['before'] - 1)) < 1e-9, g['regressed'], g['max_regression'])"
expect_out "True True
full True True True True True True False 0.1
none True True True True True True False 0.1"
# Several baselines are pooled: each strategy's median over all their epochs 2.., so one fast run
# among three does not fail the gate and two do; each file is checked (the second one named).
run "${SB[@]}" --strategy none,full --baseline "$WORK/fast.json" "$WORK/slow.json" "$WORK/slow.json" -q
expect_rc 0
run "${SB[@]}" --strategy none,full --baseline "$WORK/fast.json" "$WORK/fast.json" "$WORK/slow.json" -q --json
expect_rc 1
echo "$out" >"$WORK/gate3.json"
py "
import json
d = json.load(open('$WORK/gate3.json'))
print(len(d['baselines']), sorted(g['strategy'] for g in d['gate'] if g['regressed']))"
expect_out "3 ['full', 'none']"
py "
import json
d = json.load(open('$WORK/slow.json')); d['config']['items'] = 7
json.dump(d, open('$WORK/other-items.json', 'w'))"
run "${SB[@]}" --strategy full --baseline "$WORK/slow.json" "$WORK/other-items.json"
expect_rc 65
expect_err "smart-bench: error: $WORK/other-items.json: made with other settings (items: 7 -> 0); make a new baseline with these, or compare anyway with --compare-anyway"
# A baseline made with other settings is refused before the run (65) naming them, unless
# --compare-anyway (issue 85, goal 1: a 128/500 baseline against a 32/100 run read "+207%"):
# another item count, another preprocessing, another model file (by its SHA-256).
run "${SB[@]}" --strategy full --items 100 --baseline "$WORK/slow.json"
expect_rc 65
expect_err "smart-bench: error: $WORK/slow.json: made with other settings (items: 0 -> 100); make a new baseline with these, or compare anyway with --compare-anyway"
run "${SB[@]}" --strategy full --items 100 --baseline "$WORK/slow.json" --compare-anyway -q
expect_rc 0
py "
import json
d = json.load(open('$WORK/slow.json'))
d['config']['model_sha256'] = 'ab' * 32
d['config']['preprocess']['resize'] = '128'
json.dump(d, open('$WORK/other.json', 'w'))
"
run "${SB[@]}" --strategy full --baseline "$WORK/other.json"
expect_rc 65
expect_err "smart-bench: error: $WORK/other.json: made with other settings (preprocess/resize: \"128\" -> \"none\", model_sha256: \"$(printf 'ab%.0s' {1..32})\" -> null); make a new baseline with these, or compare anyway with --compare-anyway"

# embed: the frozen encoder every step against its embeddings read from a cache-fill cache.
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$D/cnn.pt" --features images --out "$WORK/c.h5"
run "$TC_BIN/smart-bench" --data "$D/images.h5" --labels labels --strategy embed --frozen-encoder "$D/cnn.pt" \
  --cache "$WORK/c.h5" --epochs 1 -b 50 --json
expect_rc 0
echo "$out" > "$WORK/embed.json"
py "
import json
r = {x['strategy']: x for x in json.load(open('$WORK/embed.json'))['records']}
print(sorted(r), r['embed_encoder']['hit_rate'], r['embed_cache']['hit_rate'], r['embed_cache']['samples'])
"
expect_out "['embed_cache', 'embed_encoder'] 0.0 1.0 300"
run "$TC_BIN/smart-bench" --data "$D/images.h5" --strategy embed
expect_rc 64
expect_err "smart-bench: error: --strategy: embed needs --frozen-encoder and --cache"

# Errors.
run "$TC_BIN/smart-bench" --data "$D/images.h5" --strategy none,lru
expect_rc 64
expect_err "smart-bench: error: --strategy: unknown strategy 'lru' (known: none, full, stochastic, smart, embed)"
run "$TC_BIN/smart-bench" --strategy none
expect_rc 64
expect_err "smart-bench: error: --data: give exactly one of --data, --files and --shm"
run "$TC_BIN/smart-bench" --data "$D/images.h5" --strategy smart --replace-rate 0
expect_rc 64
expect_err "smart-bench: error: --replace-rate: must be in (0, 1]"
# Values that were accepted and ran (issue 84, messages): a negative count, time or allowance.
for bad in "--replace-workers|-2|must be an integer from 1 to 64" "--model-ms|-5|must be a number >= 0" \
           "--max-regression|-1|must be a number >= 0"; do
  IFS='|' read -r flag value why <<<"$bad"
  run "$TC_BIN/smart-bench" --data "$D/images.h5" --strategy none --epochs 1 "$flag" "$value"
  expect_rc 64
  expect_err "smart-bench: error: $flag: $why, got '$value' (see --help)"
done
run "$TC_BIN/smart-bench" --files "$WORK/nothing" --strategy none
expect_rc 66
expect_err "smart-bench: error: $WORK/nothing/meta.json: cannot open (see docs/smart-bench.md)"
# A meta.json of the wrong shape is bad data (65), never an internal error.
mkdir -p "$WORK/badmeta"
for meta in '{"count": "3", "dims": [4]}' '{"count": 3, "dims": [-4]}' '[1, 2]' \
            '{"count": 3, "dims": [4], "labels": "abc"}' '{"count": 9223372036854775807, "dims": [4]}'; do
  printf '%s\n' "$meta" > "$WORK/badmeta/meta.json"
  run "$TC_BIN/smart-bench" --files "$WORK/badmeta" --strategy none
  expect_rc 65
  expect_err "smart-bench: error: $WORK/badmeta/meta.json: expected {\"count\": N, \"dims\": [positive sizes], \"labels\": [N integers]}"
done
run "$TC_BIN/smart-bench" --data "$D/images.h5" --dataset vec --strategy none
expect_rc 65
expect_err "smart-bench: error: $D/images.h5: 'vec' must hold uint8 items or images"
run "$TC_BIN/smart-bench" --data "$D/images.h5" --baseline "$D/images.h5"
expect_rc 65
expect_err "smart-bench: error: $D/images.h5: not a smart-bench --json document"
run "$TC_BIN/smart-bench" --data "$D/images.h5" --json --csv
expect_rc 64
finish
