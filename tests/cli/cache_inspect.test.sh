#!/usr/bin/env bash
# cache-inspect: summary, --json, --stats, --head, --check, --verify, and bad files.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
C="$WORK/c.h5"
cp "$D/cnn.pt" "$WORK/enc.pt"
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$WORK/enc.pt" --features images \
  --labels labels --key skeys --out "$C" || _fail "cache-fill failed"

run "$TC_BIN/cache-inspect" "$C"
expect_rc 0
expect_out_has $'\n  format       traincache v1, complete\n  rows         300 (input rows 0..300)\n'
expect_out_has $'\n  labels       int64 from \'labels\', 5 classes: 0:60 1:60 2:60 3:60 4:60\n  keys         string from \'skeys\''
expect_out_re "embeddings/cnn  \[300,32\] float32 37.50 KiB, optimized, from $WORK/enc.pt"
expect_err ""

run "$TC_BIN/cache-inspect" --json --stats "$C"
expect_rc 0
echo "$out" > "$WORK/doc.json"
# Stats against numpy: both sides sum float32 values in double precision, in different orders,
# so they agree to ~1e-15 relative; 1e-9 (1e-12 absolute for min/max) leaves room for that only.
py "
import json, h5py, numpy as np
j = json.load(open('$WORK/doc.json')); f = j['files'][0]
e = h5py.File('$C', 'r')['embeddings/cnn'][:].astype(np.float64); n = np.linalg.norm(e, axis=1)
s = f['stats'][0]
print(j['schema'], f['rows'], f['embeddings'][0]['shape'], f['labels']['counts']['3'], f['keys']['dtype'],
      abs(s['norm_mean'] - n.mean()) < 1e-9 * n.mean(), abs(s['norm_std'] - n.std()) < 1e-9 * n.mean(),
      abs(s['norm_min'] - n.min()) < 1e-12, abs(s['norm_max'] - n.max()) < 1e-12, s['nan_count'])
"
expect_out "cache-inspect/1 300 [300, 32] 60 string True True True True 0"

run "$TC_BIN/cache-inspect" --head 2 "$C"
expect_rc 0
py "
import h5py
f = h5py.File('$C', 'r'); e = f['embeddings/cnn']
print('row\tkey\tlabel\tcnn')
for i in range(2):
    vals = ','.join('%.6g' % v for v in e[i][:8])
    print('%d\t%s\t%d\t%s,...(32)' % (i, f['keys'].asstr()[i], f['labels'][i], vals))
"
want=$out
run "$TC_BIN/cache-inspect" --head 2 "$C"
expect_out "$want"

# --check: silent success; one line per bad file and exit 1.
run "$TC_BIN/cache-inspect" --check "$C"
expect_rc 0
expect_no_out
run "$TC_BIN/cache-inspect" --check -v "$C"
expect_out "$C	ok"
cp "$C" "$WORK/incomplete.h5"
"$TC_PYTHON" -c "import h5py; h5py.File('$WORK/incomplete.h5', 'r+').attrs['complete'] = 0"
cp "$C" "$WORK/nan.h5"
"$TC_PYTHON" -c "import h5py, numpy as np; f = h5py.File('$WORK/nan.h5', 'r+'); f['embeddings/cnn'][3, 5] = np.nan"
cp "$C" "$WORK/short.h5"
"$TC_PYTHON" -c "import h5py; h5py.File('$WORK/short.h5', 'r+').attrs['rows'] = 301"
run "$TC_BIN/cache-inspect" --check "$C" "$WORK/incomplete.h5" "$WORK/nan.h5" "$WORK/short.h5" \
  "$D/foreign.h5" "$WORK/missing.h5"
expect_rc 1
expect_out "$WORK/incomplete.h5	incomplete (complete attribute is not 1)
$WORK/nan.h5	/embeddings/cnn holds 1 NaN and 0 Inf values
$WORK/short.h5	/embeddings/cnn has 300 rows, expected 301; /labels has 300 rows, expected 301; /keys has 300 rows, expected 301; /row_digests has 300 rows, expected 301; holds 301 rows, the fingerprint's input has 300
$D/foreign.h5	$D/foreign.h5: not a traincache cache (no format=\"traincache\" attribute)
$WORK/missing.h5	$WORK/missing.h5: no such file or directory"
run "$TC_BIN/cache-inspect" --check --json "$C" "$WORK/nan.h5"
expect_rc 1
expect_out_has '{"path":"'"$WORK"'/nan.h5","ok":false,'

# Bad files outside --check: their own exit codes, one line each, and the other files still shown.
run "$TC_BIN/cache-inspect" "$D/foreign.h5"
expect_rc 65
expect_err "cache-inspect: error: $D/foreign.h5: not a traincache cache (no format=\"traincache\" attribute)"
run "$TC_BIN/cache-inspect" "$D/truncated.h5"
expect_rc 65
expect_err "cache-inspect: error: $D/truncated.h5: cannot open HDF5 file (corrupt?): unable to open file"
run "$TC_BIN/cache-inspect" "$D/notes.txt"
expect_rc 65
expect_err "cache-inspect: error: $D/notes.txt: not an HDF5 file"
run "$TC_BIN/cache-inspect" "$WORK/missing.h5" "$C"
expect_rc 66
expect_err "cache-inspect: error: $WORK/missing.h5: no such file or directory"
expect_out_has "$C"
cp "$C" "$WORK/future.h5"
"$TC_PYTHON" -c "import h5py; h5py.File('$WORK/future.h5', 'r+').attrs['format_version'] = 99"
run "$TC_BIN/cache-inspect" "$WORK/future.h5"
expect_rc 65
expect_err "cache-inspect: error: $WORK/future.h5: format version 99 is newer than this tool reads (1)"
run "$TC_BIN/cache-inspect" --check --verify 3 "$C"
expect_rc 64
expect_err "cache-inspect: error: --check excludes --verify (see --help)"

# LibTorch is loaded only to verify (libtraincache_engines.so): a summary, --check and --head run
# where the module cannot be loaded; --verify there is 69, saying why.
export TRAINCACHE_ENGINES_MODULE="$WORK/none.so"
run "$TC_BIN/cache-inspect" --head 1 "$C"
expect_rc 0
run "$TC_BIN/cache-inspect" --check --json "$C"
expect_rc 0
expect_out_has '"ok":true'
run "$TC_BIN/cache-inspect" --verify 2 "$C"
expect_rc 69
expect_err "cache-inspect: error: LibTorch: cannot load libtraincache_engines.so: $WORK/none.so: cannot open shared object file: No such file or directory"
unset TRAINCACHE_ENGINES_MODULE
expect_eq "$(readelf -d "$TC_BIN/cache-inspect" | grep -c 'NEEDED.*lib\(torch\|c10\)')" 0 "LibTorch libraries cache-inspect needs at start"

# 69: --verify on a device this LibTorch does not have.
no_cuda
run "$TC_BIN/cache-inspect" --verify 2 --device $NO_CUDA "$C"
expect_rc 69
expect_err "cache-inspect: error: --device $NO_CUDA: $NO_CUDA_WHY"

# --verify: the recorded encoder reproduces the rows; another encoder or changed data does not.
run "$TC_BIN/cache-inspect" --verify 8 "$C"
expect_rc 0
expect_out_re "^$C	cnn	ok: 8 rows match \(max abs diff [0-9.e-]+, tolerance 1e-05 \+ 0.0001\*\|x\|\)$"
run "$TC_BIN/cache-inspect" --verify 8 --encoder cnn="$D/cnn_other.pt" "$C"
expect_rc 1
expect_out_re "^$C	cnn	MISMATCH: 8 of 8 rows differ \(first row [0-9]+, max abs diff [0-9.e-]+\); encoder file changed$"
cp "$D/cnn_other.pt" "$WORK/enc.pt"
run "$TC_BIN/cache-inspect" --verify 4 --json "$C"
expect_rc 1
expect_out_has '"encoder_changed":true'
cp "$D/cnn.pt" "$WORK/enc.pt"
cp "$D/images.h5" "$WORK/changed.h5"
"$TC_PYTHON" -c "import h5py; f = h5py.File('$WORK/changed.h5', 'r+'); f['images'][:] = 255 - f['images'][:]"
run "$TC_BIN/cache-inspect" --verify 8 --input "$WORK/changed.h5" "$C"
expect_rc 1
expect_out_re "	MISMATCH: 8 of 8 rows differ \(first row [0-9]+, max abs diff [0-9.e-]+\)$"
run "$TC_BIN/cache-inspect" --verify 8 --encoder nope=x.pt "$C"
expect_rc 64
expect_err "cache-inspect: error: --encoder: the cache has no encoder named 'nope' (have: cnn)"

# ---- --export npy DIR: .npy files of --rows-per-file rows per encoder, keys and labels as JSON Lines
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$D/cnn.pt" --encoder other="$D/cnn_other.pt" \
  --features images --labels labels --dtype float16 --rows 10:300 --out "$WORK/two.h5" || _fail "cache-fill failed"
run "$TC_BIN/cache-inspect" "$WORK/two.h5" --export npy "$WORK/export" --rows-per-file 128
expect_rc 0
expect_no_out
expect_err "cache-inspect: $WORK/two.h5: 290 rows exported to $WORK/export (3 files per encoder)"
# The loading snippet of docs/cache-inspect.md, then the rows against h5py's.
py "
import glob, os, re, h5py, numpy as np
doc = open('$TC_SOURCE/docs/cache-inspect.md').read()
snippet = re.search(r'Loading an export.*?\`\`\`python\n(.*?)\`\`\`', doc, re.S).group(1)
names = {}
exec(snippet.replace('d = \"vectors\"', 'd = \"$WORK/export\"'), names)
cnn, meta, d = names['cnn'], names['meta'], names['d']
f = h5py.File('$WORK/two.h5')
other = np.concatenate([np.load(p) for p in sorted(glob.glob(d + '/other/*.npy'))])
print(sorted(os.listdir(d)), [np.load(p).shape[0] for p in sorted(glob.glob(d + '/cnn/*.npy'))], cnn.dtype,
      cnn.tobytes() == f['embeddings/cnn'][:].tobytes(), other.tobytes() == f['embeddings/other'][:].tobytes(),
      [m['row'] for m in meta] == list(range(290)), [m['key'] for m in meta] == list(range(10, 300)),
      [m['label'] for m in meta] == f['labels'][:].tolist(), meta[0], oct(os.stat(d).st_mode & 0o777))
"
expect_out "['cnn', 'metadata', 'other'] [128, 128, 34] float16 True True True True True {'row': 0, 'key': 10, 'label': 0} 0o755"
run "$TC_BIN/cache-inspect" "$WORK/two.h5" --export npy "$WORK/export" --json
expect_rc 73
expect_err "cache-inspect: error: $WORK/export: exists (remove it first)"
run "$TC_BIN/cache-inspect" "$WORK/two.h5" --export npy "$WORK/nodir/export"
expect_rc 73
expect_err_re "^cache-inspect: error: $WORK/nodir/export: cannot create: "
run "$TC_BIN/cache-inspect" "$WORK/two.h5" --export npy ''
expect_rc 64
expect_err "cache-inspect: error: --export: the folder's name is empty: --export npy DIR"
run "$TC_BIN/cache-inspect" "$WORK/two.h5" --export parquet "$WORK/p"
expect_rc 64
expect_err "cache-inspect: error: --export: unknown format 'parquet' (npy is the one there is)"
run "$TC_BIN/cache-inspect" "$WORK/two.h5" "$C" --export npy "$WORK/p"
expect_rc 64
expect_err "cache-inspect: error: --export: exports one cache at a time, not 2"
run "$TC_BIN/cache-inspect" "$WORK/two.h5" --export npy
expect_rc 64
expect_err "cache-inspect: error: --export: expected a format and a folder: --export npy DIR"
# An option between the format and the folder (the folder was then taken for a second cache).
run "$TC_BIN/cache-inspect" --export npy --normalize "$WORK/p" "$WORK/two.h5"
expect_rc 64
expect_err "cache-inspect: error: --export: expected a format and a folder, got 'npy' alone: write the folder right after the format (--export npy DIR CACHE)"
expect_no_file "$WORK/p"
run "$TC_BIN/cache-inspect" "$WORK/two.h5" --export npy "$WORK/p" --rows-per-file 0
expect_rc 64
expect_no_file "$WORK/p"
[ -z "$(ls -A "$WORK" | grep '^\.export\.')" ] && _ok || _fail "a temporary export folder was left behind"

# SIGINT stops an export (it was ignored under a shell's '&'), and the unfinished folder goes with it.
run "$TC_BIN/cache-fill" --input "$D/big.h5" --rows 0:4000 --features images --encoder cnn="$D/cnn.pt" --threads 2 -q \
  --out "$WORK/big.h5"
expect_rc 0
"$TC_BIN/cache-inspect" --export npy "$WORK/bigx" --rows-per-file 1 "$WORK/big.h5" 2>"$WORK/int.err" &
pid=$!
exported=0
for _ in $(seq 1 3000); do  # up to 30 s on a busy machine; the check below says if it never got there
  exported=$(find "$WORK" -maxdepth 3 -path "$WORK/.bigx.*" -name '*.npy' 2>/dev/null | head -50 | wc -l)
  [ "$exported" -ge 50 ] && break
  sleep 0.01
done
expect_eq "$exported" 50 "files the export had written when it was interrupted"
kill -INT "$pid"
wait "$pid"
expect_eq "$?" 130 "an interrupted export's exit status"
expect_eq "$(cat "$WORK/int.err")" "cache-inspect: interrupted: stopping; the unfinished export is removed
cache-inspect: error: interrupted while exporting (the unfinished export removed)"
expect_no_file "$WORK/bigx"
[ -z "$(ls -A "$WORK" | grep '^\.bigx\.')" ] && _ok || _fail "an interrupted export left its temporary folder"
# A killed export (SIGKILL: nothing can remove its folder) is removed by the next export to the
# same folder, which says so; one still being written (locked) is left alone (issue 84, item 16).
"$TC_BIN/cache-inspect" --export npy "$WORK/bigx" --rows-per-file 1 "$WORK/big.h5" 2>/dev/null &
pid=$!
for _ in $(seq 1 3000); do
  [ "$(find "$WORK" -maxdepth 3 -path "$WORK/.bigx.*" -name '*.npy' 2>/dev/null | head -50 | wc -l)" -ge 50 ] && break
  sleep 0.01
done
kill -KILL "$pid"
wait "$pid" 2>/dev/null
expect_eq "$(ls -A "$WORK" | grep -c '^\.bigx\.')" 1 "a killed export's folder"
mkdir "$WORK/.bigx.AAAAAAAAAAAA.tmp"  # another exporter's, locked while it writes
exec 9<"$WORK/.bigx.AAAAAAAAAAAA.tmp"
flock -x 9
run "$TC_BIN/cache-inspect" --export npy "$WORK/bigx" "$WORK/big.h5"
expect_rc 0
expect_err_has "cache-inspect: warning: $WORK/bigx: removed 1 unfinished export(s) to it that a killed run had left"
expect_eq "$(ls -A "$WORK" | grep '^\.bigx\.')" ".bigx.AAAAAAAAAAAA.tmp" "what the export left beside it"
exec 9<&-
rm -r "$WORK/.bigx.AAAAAAAAAAAA.tmp" "$WORK/bigx"

# The documented form with a trailing slash (the temporary folder went inside DEST: 73), and options
# after the cache file (--export swallowed it: 64 "files is required") (issue 43, item 9).
mkdir "$WORK/ex"
(cd "$WORK/ex" && "$TC_BIN/cache-inspect" --export npy vectors/ "$WORK/two.h5" -q) && _ok || _fail "--export npy vectors/ failed"
expect_file "$WORK/ex/vectors/cnn/cnn_00000.npy"
[ "$(ls -A "$WORK/ex/vectors" | tr '\n' ' ')" = "cnn metadata other " ] && _ok || _fail "the export holds more than its folders"
run "$TC_BIN/cache-inspect" --export npy "$WORK/ex/j" "$WORK/two.h5" --json
expect_rc 0
expect_out '{"schema":"cache-inspect/1","export":{"path":"'"$WORK"'/two.h5","dir":"'"$WORK"'/ex/j","rows":290,"files":1,"encoders":["cnn","other"]}}'
# The wrong order is named (it was "unknown format 'DIR'", item 20).
run "$TC_BIN/cache-inspect" --export "$WORK/ex/w" npy "$WORK/two.h5"
expect_rc 64
expect_err "cache-inspect: error: --export: the format comes first: --export npy $WORK/ex/w"
run "$TC_BIN/cache-inspect" --export npy "$WORK/two.h5" "$WORK/ex/w"
expect_rc 64
expect_err "cache-inspect: error: --export: '$WORK/two.h5' is a file and '$WORK/ex/w' does not exist: the folder comes first, --export npy DIR CACHE"
expect_no_file "$WORK/ex/w"
# --normalize: unit vectors along the last axis, in float32 (from float16 here); tolerance: one
# float32 rounding of each element (the tool sums in double, numpy in float32).
run "$TC_BIN/cache-inspect" --export npy "$WORK/ex/n" --normalize "$WORK/two.h5" -q
expect_rc 0
py "
import numpy as np, h5py
x = h5py.File('$WORK/two.h5')['embeddings/cnn'][:].astype(np.float32)
y = np.load('$WORK/ex/n/cnn/cnn_00000.npy')
want = x / np.linalg.norm(x, axis=1, keepdims=True)
print(y.dtype, y.shape, bool(np.abs(y - want).max() < 1e-6), bool(np.abs(np.linalg.norm(y, axis=1) - 1).max() < 1e-6))
"
expect_out "float32 (290, 32) True True"
run "$TC_BIN/cache-inspect" --normalize "$WORK/two.h5"
expect_rc 64
# A damaged cache is 65 as --check says (was 70): a rows attribute past the data, /labels short.
cp "$WORK/two.h5" "$WORK/ex/long.h5"
cp "$WORK/two.h5" "$WORK/ex/short.h5"
py "
import h5py, numpy as np
with h5py.File('$WORK/ex/long.h5', 'a') as f:
    f.attrs['rows'] = np.int64(400)
with h5py.File('$WORK/ex/short.h5', 'a') as f:
    labels = f['labels'][:280]
    del f['labels']
    f['labels'] = labels
"
run "$TC_BIN/cache-inspect" --export npy "$WORK/ex/l" "$WORK/ex/long.h5"
expect_rc 65
expect_one_line_err
run "$TC_BIN/cache-inspect" --export npy "$WORK/ex/s" "$WORK/ex/short.h5"
expect_rc 65
expect_err "cache-inspect: error: $WORK/ex/short.h5: damaged: /labels has 280 rows, expected 290 (cache-inspect --check lists what is wrong)"
expect_no_file "$WORK/ex/l"
expect_no_file "$WORK/ex/s"
# One validator for --check and --export (#62 item 14): what cache-fill writes (float labels, two
# label columns) passes both; what one refused the other passed (no /embeddings, an unreadable
# /skipped/reasons, int32 embeddings): now both refuse it, for the same reason.
py "
import h5py, numpy as np
def edit(name, change):
    import shutil
    shutil.copy('$WORK/two.h5', '$WORK/ex/%s.h5' % name)
    with h5py.File('$WORK/ex/%s.h5' % name, 'a') as f:
        change(f)
def relabel(values):
    def change(f):
        del f['labels']
        f['labels'] = values
    return change
labels = h5py.File('$WORK/two.h5', 'r')['labels'][()]
edit('flabels', relabel(labels.astype(np.float32) + 0.5))
edit('wide', relabel(np.stack([labels, labels * 10], 1)))
def no_embeddings(f):
    del f['embeddings']
edit('noemb', no_embeddings)
def int_embeddings(f):
    e = f['embeddings/cnn'][()]
    del f['embeddings/cnn']
    f['embeddings/cnn'] = e.astype(np.int32)
edit('intemb', int_embeddings)
def bad_reasons(f):
    f['skipped/rows'] = np.array([1, 2], np.int64)
    f['skipped/reasons'] = np.array([1, 2, 3], np.int64)
edit('badskip', bad_reasons)
"
expect_rc 0
for name in flabels wide; do
  run "$TC_BIN/cache-inspect" --check "$WORK/ex/$name.h5"
  expect_rc 0
  run "$TC_BIN/cache-inspect" --export npy "$WORK/ex/$name" "$WORK/ex/$name.h5" -q
  expect_rc 0
done
py "
import json
f = [json.loads(l) for l in open('$WORK/ex/flabels/metadata/metadata_00000.jsonl')]
w = [json.loads(l) for l in open('$WORK/ex/wide/metadata/metadata_00000.jsonl')]
print(f[1]['label'] - int(f[1]['label']), len(w[1]['label']), w[1]['label'][1] == 10 * w[1]['label'][0])"
expect_out "0.5 2 True"
for name in noemb intemb badskip; do
  run "$TC_BIN/cache-inspect" --check "$WORK/ex/$name.h5"
  expect_rc 1
  reason=${out#*$'\t'}
  run "$TC_BIN/cache-inspect" --export npy "$WORK/ex/$name" "$WORK/ex/$name.h5"
  expect_rc 65
  expect_err "cache-inspect: error: $WORK/ex/$name.h5: damaged: $reason (cache-inspect --check lists what is wrong)"
  expect_no_file "$WORK/ex/$name"
done
# Rows holding NaN are copied with a warning (--check fails the same file; item 32).
cp "$WORK/two.h5" "$WORK/ex/nan.h5"
py "
import h5py, numpy as np
with h5py.File('$WORK/ex/nan.h5', 'a') as f:
    e = f['embeddings/cnn']
    e[3] = np.nan
    e[7, 1] = np.inf
"
run "$TC_BIN/cache-inspect" --export npy "$WORK/ex/nan" "$WORK/ex/nan.h5"
expect_rc 0
expect_err_has "cache-inspect: warning: $WORK/ex/nan.h5: exported rows holding NaN or Inf: 2 (copied as they are; cache-inspect --check fails this cache)"
finish
