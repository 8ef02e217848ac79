#!/usr/bin/env bash
# scripts/plot-train: gc-train --metrics files (one run, or several overlaid) to a PNG of loss,
# learning rate and every evaluated metric with its interval; resumed steps counted once; errors.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
PLOT=${TC_SOURCE:?}/scripts/plot-train
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder mlp="$D/mlp.pt" --features vec --labels labels \
  --out "$WORK/v.h5" || _fail "cache-fill"
T=(--cache "$WORK/v.h5" --embeddings mlp --head mlp:32,16 --epochs 4 -b 50 --eval-split 0.3 --stratify
  --eval-every 3 --eval-k 1,5)
tool "$TC_BIN/gc-train" -q "${T[@]}" --metrics "$WORK/a.jsonl" --eval-bootstrap 100 || _fail "gc-train a"
tool "$TC_BIN/gc-train" -q "${T[@]}" --loss softmax --metrics "$WORK/b.jsonl" || _fail "gc-train b"

# Two runs: 16 steps and 7 evaluations (0, 3, 6, 9, 12, 15, 16) each; intervals only where run a had them.
run "$PLOT" "$WORK/a.jsonl" "$WORK/b.jsonl" -o "$WORK/curves.png" --label supcon --label softmax
expect_rc 0
expect_no_out
expect_err "plot-train: wrote $WORK/curves.png: 2 run(s), 32 steps, 14 evaluations; metrics: precision_at_1 with intervals, precision_at_5 with intervals, r_precision with intervals, map_at_r with intervals, accuracy_at_1, accuracy_at_5"
# A PNG of 3 columns x 3 rows of panels (loss, lr, 6 metrics) at 100 dpi; no temporary file left.
py "
import struct
b = open('$WORK/curves.png', 'rb').read(24)
w, h = struct.unpack('>II', b[16:24])
print(b[:8] == b'\x89PNG\r\n\x1a\n', w, abs(h - 990) <= 1)
"
expect_out "True 1380 True"
expect_eq "$(ls -A "$WORK" | grep -c '^\.plot-train-')" 0 "temporary files left"
# Readable as any new file is (0666 less the umask): it was 0600, mkstemp's mode.
expect_eq "$(stat -c %a "$WORK/curves.png")" "$(printf '%o' $((0666 & ~$(umask))))" "the PNG's mode"

# --metric picks panels; a resumed run's repeated steps count once.
cat "$WORK/a.jsonl" <(sed -n '10,14p' "$WORK/a.jsonl") >"$WORK/resumed.jsonl"
run "$PLOT" "$WORK/resumed.jsonl" -o "$WORK/one.png" --metric map_at_r
expect_rc 0
expect_err "plot-train: wrote $WORK/one.png: 1 run(s), 16 steps, 7 evaluations; metrics: map_at_r with intervals"
py "
import struct
w, h = struct.unpack('>II', open('$WORK/one.png', 'rb').read(24)[16:24])
print(w, abs(h - 330) <= 1)
"
expect_out "1380 True"

# Errors: one line each, documented exit codes, nothing written.
run "$PLOT" "$WORK/none.jsonl" -o "$WORK/x.png"
expect_rc 66
expect_err "plot-train: error: $WORK/none.jsonl: no such file"
printf '{"step":1,"loss":2}\nnot json\n' >"$WORK/bad.jsonl"
run "$PLOT" "$WORK/bad.jsonl" -o "$WORK/x.png"
expect_rc 65
expect_err "plot-train: error: $WORK/bad.jsonl:2: not a gc-train --metrics line"
run "$PLOT" "$WORK/a.jsonl" -o "$WORK/x.png" --metric accuracy_at_1
expect_rc 64
expect_err "plot-train: error: --metric: 'accuracy_at_1' is not reported by these runs (they have: precision_at_1, precision_at_5, r_precision, map_at_r)"
run "$PLOT" "$WORK/a.jsonl"
expect_rc 64
expect_err "plot-train: error: usage: the following arguments are required: -o/--out"
run "$PLOT" "$WORK/a.jsonl" -o "$WORK/no/dir/x.png"
expect_rc 73
expect_err_has "plot-train: error: $WORK/no/dir/x.png: cannot create:"
expect_no_file "$WORK/x.png"
run "$PLOT" --help
expect_rc 0
expect_out_has "Exit status: 0 written; 64 usage"
finish
