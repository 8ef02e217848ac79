#!/usr/bin/env bash
# Label columns by key (issue 85, goal 3): cache-fill --labels NAME=SOURCE,... stores the input's
# labels and fields of key tables (CSV, JSON Lines, .npz) joined on the input's keys, side by
# side and named (shards and their merge too); an edited table is taken in by --update without a
# row encoded again; cache-inspect shows every column, --check counts their rows, --export and
# gc-train pick one by name. Tables that miss a key, hold one twice or share no key with the input
# are refused, the cache kept.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/images_lib.sh"
IMGS=$WORK/mixed
FILL+=(--resize 8 --center-crop 8 --channels gray)

# The tables: every file of the folder, in reverse order, with a string and an integer field, and
# a key the folder does not have; a JSON Lines table of a third field.
"$TC_PYTHON" - "$IMGS" "$WORK" <<'PY' || _fail "tables"
import json, os, sys
imgs, work = sys.argv[1:]
keys = [c + "/" + f for c in sorted(os.listdir(imgs)) for f in sorted(os.listdir(os.path.join(imgs, c)))]
shape = ["wide", "tall", "square"]
with open(os.path.join(work, "tags.csv"), "w") as f:
    f.write("key,orientation,size\nnot/in.png,tall,1\n")
    for i, k in reversed(list(enumerate(keys))):
        f.write(f"{k},{shape[i % 3]},{1000 + 7 * i}\n")
with open(os.path.join(work, "q.jsonl"), "w") as f:
    for i, k in enumerate(keys):
        f.write(json.dumps({"key": k, "grade": i % 4}) + "\n")
with open(os.path.join(work, "keys.txt"), "w") as f:
    f.write("\n".join(keys) + "\n")
PY
LAB=(--labels "label,tags.csv:orientation,sz=tags.csv:size,$WORK/q.jsonl")
cd "$WORK" || exit 1
run "$TC_BIN/cache-fill" --input "$IMGS" "${FILL[@]}" "${LAB[@]}" --out c.h5
expect_rc 0
# Each column equals the table's value for the row's key (an independent join), named as given.
check_columns() {
  py "
import csv, json, h5py
f = h5py.File('$1', 'r')
keys = [k.decode() for k in f['keys'][()]]
rows = {r['key']: r for r in csv.DictReader(open('tags.csv'))}
grade = {j['key']: j['grade'] for j in map(json.loads, open('q.jsonl'))}
names = sorted({r['orientation'] for r in rows.values()})
o, s, g = f['label_columns/orientation'], f['label_columns/sz'], f['label_columns/grade']
print(json.loads(o.attrs['label_names']) == names,
      [names[v] for v in o[()]] == [rows[k]['orientation'] for k in keys],
      list(s[()]) == [int(rows[k]['size']) for k in keys], list(g[()]) == [grade[k] for k in keys],
      [c['name'] for c in json.loads(f.attrs['label_columns'])], f['labels'].attrs['name'], s.attrs['source'])"
  expect_rc 0
  expect_out "True True True True ['label', 'orientation', 'sz', 'grade'] label tags.csv:size"
}
check_columns c.h5
run "$TC_BIN/cache-inspect" c.h5
expect_out_has "
               orientation: int64 from 'tags.csv:orientation', 3 classes: 0=square:96 1=tall:96 2=wide:96
               sz: int64 from 'tags.csv:size', 288 values from 1000 to 3009
               grade: int64 from '$WORK/q.jsonl', 4 classes: 0:72 1:72 2:72 3:72
  keys "
run "$TC_BIN/cache-inspect" --json c.h5
printf '%s' "$out" >inspect.json
py "
import json
j = json.load(open('inspect.json'))['files'][0]
print(j['labels']['name'], [(c['name'], c['dataset'], c['classes']) for c in j['label_columns']])"
expect_out "label [('label', '/labels', 9), ('orientation', '/label_columns/orientation', 3), ('sz', '/label_columns/sz', 288), ('grade', '/label_columns/grade', 4)]"
# --head shows every label column, a column each after the first (it showed /labels alone), each
# value with its class name where the column names its classes (the label_names attribute); --json
# gives them by name.
py "
import h5py, json
f = h5py.File('c.h5', 'r'); e = f['embeddings/flat']
print('row\tkey\tlabel\torientation\tsz\tgrade\tflat')
def shown(n, i):
    v = int(f[n][i]); names = json.loads(f[n].attrs.get('label_names', '[]'))
    return '%d (%s)' % (v, names[v]) if names else '%d' % v
for i in range(3):
    vals = ','.join('%.6g' % v for v in e[i][:8])
    cols = [shown(n, i) for n in ('labels', 'label_columns/orientation', 'label_columns/sz', 'label_columns/grade')]
    print('%d\t%s\t%s\t%s,...(%d)' % (i, f['keys'].asstr()[i], '\t'.join(cols), vals, e.shape[1]))
"
want=$out
run "$TC_BIN/cache-inspect" --head 3 c.h5
expect_rc 0
expect_out "$want"
run "$TC_BIN/cache-inspect" --head 2 --json c.h5
printf '%s' "$out" >head.json
py "
import json, h5py
f = h5py.File('c.h5', 'r')
rows = json.load(open('head.json'))['files'][0]['rows']
print([r['labels'] for r in rows] == [{'label': str(f['labels'][i]), 'orientation': str(f['label_columns/orientation'][i]),
       'sz': str(f['label_columns/sz'][i]), 'grade': str(f['label_columns/grade'][i])} for i in range(2)],
      [list(r['labels']) for r in rows][0])
cols = {'label': 'labels', 'orientation': 'label_columns/orientation', 'sz': 'label_columns/sz', 'grade': 'label_columns/grade'}
names = {c: json.loads(f[d].attrs.get('label_names', '[]')) for c, d in cols.items()}
print([r['label_names'] == {c: names[c][int(f[d][i])] for c, d in cols.items() if names[c]} for i, r in enumerate(rows)],
      [r['label_name'] == names['label'][int(f['labels'][i])] for i, r in enumerate(rows)], sorted(rows[1]['label_names']))"
expect_out "True ['label', 'orientation', 'sz', 'grade']
[True, True] [True, True] ['label', 'orientation']"

# --export's metadata names each row's class beside its number (label_name), for the column it
# exports; a column without class names has none.
run "$TC_BIN/cache-inspect" --export npy exported c.h5 -q
expect_rc 0
run "$TC_BIN/cache-inspect" --export npy exported-sz --labels sz c.h5 -q
expect_rc 0
py "
import h5py, json
f = h5py.File('c.h5', 'r')
names = json.loads(f['labels'].attrs['label_names'])
meta = [json.loads(l) for l in open('exported/metadata/metadata_00000.jsonl')]
sz = [json.loads(l) for l in open('exported-sz/metadata/metadata_00000.jsonl')]
print(len(meta) == f.attrs['rows'], all(m['label_name'] == names[m['label']] for m in meta),
      any('label_name' in m for m in sz), meta[0]['label_name'])"
expect_out "True True False jpeg_gray"

# ---- an edited table: --update rewrites the columns, encodes nothing, keeps the embeddings -----
cp c.h5 before.h5
sed -i 's/,wide,/,tall,/' tags.csv
run "$TC_BIN/cache-fill" --input "$IMGS" "${FILL[@]}" "${LAB[@]}" --out c.h5
expect_rc 73
expect_err_has "(changed: input/content_xxh3): only the input's data, labels, keys or batch size changed"
run "$TC_BIN/cache-fill" --input "$IMGS" "${FILL[@]}" "${LAB[@]}" --out c.h5 --update --json
expect_rc 0
printf '%s' "$out" >update.json
py "
import json, h5py, numpy as np
r = json.load(open('update.json'))
a, b = h5py.File('before.h5', 'r'), h5py.File('c.h5', 'r')
print(r['rows_encoded'], r['update']['unchanged'], np.array_equal(a['embeddings/flat'][()], b['embeddings/flat'][()]),
      json.loads(b['label_columns/orientation'].attrs['label_names']))"
expect_out "0 288 True ['square', 'tall']"
check_columns c.h5
cp c.h5 updated.h5
run "$TC_BIN/cache-fill" --input "$IMGS" "${FILL[@]}" "${LAB[@]}" --out c.h5
expect_rc 0
expect_same c.h5 updated.h5

# Shards of the job carry the columns, and their merge holds the whole job's.
for i in 0 1; do
  run "$TC_BIN/cache-fill" --input "$IMGS" "${FILL[@]}" "${LAB[@]}" --out s.h5 --shard $i/2
  expect_rc 0
done
run "$TC_BIN/cache-fill" merge -o m.h5 s.h5.shard-0-of-2 s.h5.shard-1-of-2 -q
expect_rc 0
check_columns m.h5

# ---- the readers pick a column by name -----------------------------------------------------------
run "$TC_BIN/cache-inspect" --export npy exp --labels sz c.h5
expect_rc 0
py "
import json, h5py
f = h5py.File('c.h5', 'r')
lines = [json.loads(l) for l in open('exp/metadata/metadata_00000.jsonl')]
print([l['label'] for l in lines] == list(f['label_columns/sz'][()]))"
expect_out "True"
run "$TC_BIN/cache-inspect" --export npy exp2 --labels size c.h5
expect_rc 64
expect_err "cache-inspect: error: --labels: the cache has no label column 'size' (it has label, orientation, sz, grade)"
expect_no_file exp2
run "$TC_BIN/gc-train" --cache c.h5 --embeddings flat --labels orientation --head linear:4 --batch-size 32 \
  --steps 2 --out head.pt --json -q
expect_rc 0
run "$TC_BIN/gc-train" --cache c.h5 --embeddings flat --labels shape --head linear:4 --batch-size 32 --steps 2 \
  --out head.pt -q
expect_rc 64
expect_err "gc-train: error: --labels: the cache has no label column 'shape' (it has label, orientation, sz, grade)"
run "$TC_BIN/gc-train" --cache c.h5 --query-embeddings flat --passage-embeddings flat --labels orientation \
  --head linear:4 --steps 2 --out head.pt -q
expect_rc 64
expect_err "gc-train: error: --labels: with --cache picks the label column of grouped mode (--embeddings); query/passage pairs have none"

# ---- refused: the cache stays as it is ------------------------------------------------------------
cp c.h5 kept.h5
grep -v '^png_rgb/003.png,' tags.csv >short.csv
run "$TC_BIN/cache-fill" --input "$IMGS" "${FILL[@]}" --labels label,short.csv:orientation --out c.h5 --update
expect_rc 65
expect_err "cache-fill: error: short.csv: no row for key 'png_rgb/003.png' of the 288 input rows; 'orientation' needs a value for every row"
(cat tags.csv; grep '^png_la/000.png,' tags.csv) >twice.csv
run "$TC_BIN/cache-fill" --input "$IMGS" "${FILL[@]}" --labels twice.csv:size --out c.h5 --update
expect_rc 65
expect_err "cache-fill: error: twice.csv: key 'png_la/000.png' is in the table twice; each key needs one row"
"$TC_PYTHON" -c "import numpy as np; np.savez('w.npz', key=np.arange(288), weight=np.ones((288, 2), np.float32))"
run "$TC_BIN/cache-fill" --input "$IMGS" "${FILL[@]}" --labels w.npz:weight --out c.h5 --update
expect_rc 65
expect_err "cache-fill: error: w.npz: none of the input's keys is in the table (the input's first is 'jpeg_gray/000.jpeg', the table's '0'): the input's keys are --key's values, an image folder's file paths, tar samples' __key__, else the row numbers"
for bad in "label,label" "x=tags.csv:size,x=q.jsonl" "tags.csv" "w.npz" "a/b=tags.csv:size" "label,"; do
  run "$TC_BIN/cache-fill" --input "$IMGS" "${FILL[@]}" --labels "$bad" --out c.h5 --update
  expect_rc 64
  expect_one_line_err
done
expect_err "cache-fill: error: --labels: an empty item in 'label,'"
run "$TC_BIN/cache-fill" --input "$IMGS" "${FILL[@]}" --labels tags.csv --out c.h5 --update
expect_err "cache-fill: error: --labels: tags.csv: name the field to read (tags.csv:FIELD; it has orientation, size)"
expect_same c.h5 kept.h5

# ---- an input without keys: a .npz table keyed by input row number (every row of the input, not
# only --rows'), any numeric member ------------------------------------------------------------------
"$TC_PYTHON" -c "import numpy as np; np.savez('w300.npz', key=np.arange(299, -1, -1), weight=np.arange(600.0).reshape(300, 2))"
run "$TC_BIN/cache-fill" --input "$TC_DATA/images.h5" --features images --encoder "cnn=$TC_DATA/cnn.pt" \
  --rows 0:100 --labels "labels,w300.npz:weight" --out n.h5 -q
expect_rc 0
py "
import h5py, numpy as np
f = h5py.File('n.h5', 'r')
w = f['label_columns/weight']
print(w.shape, w.dtype, np.array_equal(w[()], np.arange(600.0).reshape(300, 2)[::-1][:100]))"
expect_out "(100, 2) float64 True"
run "$TC_BIN/cache-inspect" --check n.h5
expect_rc 0
# A column cut short is damage --check names.
py "
import h5py
with h5py.File('n.h5', 'r+') as f:
    w = f['label_columns/weight'][:90]
    del f['label_columns/weight']
    f['label_columns/weight'] = w"
run "$TC_BIN/cache-inspect" --check n.h5
expect_rc 1
expect_out_has "/label_columns/weight has 90 rows, expected 100"

# ---- numbers that are not all integers (a CSV's 0.25, a JSON 0.25): float64 columns of their
# values; they were numbered as class names (CSV: 0.25 became class 1) or refused (JSON) ----------
py "
import h5py, json
keys = [k.decode() for k in h5py.File('c.h5', 'r')['keys'][()]]
with open('score.csv', 'w') as f:
    f.write('key,score,zip,na,cls\n')
    for i, k in enumerate(keys):
        f.write('%s,%s,%05d,%s,%d.0\n' % (k, repr(0.25 * i - 3.5) if i % 5 else '%de-2' % i, i,
                                          'NA' if i == 7 else repr(i / 8), i % 3))
with open('score.jsonl', 'w') as f:
    for i, k in enumerate(keys):
        f.write(json.dumps({'key': k, 'score': i if i % 2 else i / 3}) + '\n')"
run "$TC_BIN/cache-fill" --input "$IMGS" --encoder "$WORK/flat.pt" --threads 2 --resize 8 --center-crop 8 \
  --channels gray --labels "s=score.csv:score,z=score.csv:zip,na=score.csv:na,j=score.jsonl:score,c=score.csv:cls" \
  --out s.h5
expect_rc 0
expect_err_has "cache-fill: warning: score.csv:9: field 'na' holds 287 numeric labels and 1 that are not ('NA' the first): every label is read as a name and numbered 0..K-1 in --label-order, so the numbers do not keep their values"
py "
import h5py, numpy as np
f = h5py.File('s.h5', 'r')
keys = [k.decode() for k in f['keys'][()]]
c = f['label_columns']
want = np.array([0.25 * i - 3.5 if i % 5 else i / 100 for i in range(len(keys))])
print(f['labels'].dtype, np.array_equal(f['labels'][()], want), c['j'].dtype,
      np.array_equal(c['j'][()], [i if i % 2 else i / 3 for i in range(len(keys))]),
      c['z'].dtype, c['z'].attrs['label_names'][:16], c['na'].dtype, c['c'].dtype, c['c'][:4].tolist())"
expect_out "float64 True float64 True int64 [\"00000\",\"00001\" int64 float64 [0.0, 1.0, 2.0, 0.0]"
run "$TC_BIN/cache-inspect" s.h5
expect_out_has "labels       s: float64 from 'score.csv:score'"
# A JSON number that is not an integer serves as a label, not as a key: refused, nothing written.
printf '{"key": 0.5, "v": 1}\n' >badkey.jsonl
run "$TC_BIN/cache-fill" --input "$IMGS" "${FILL[@]}" --labels badkey.jsonl:v --out bk.h5
expect_rc 65
expect_err "cache-fill: error: badkey.jsonl:1: field 'key' is missing or not a string or integer"
expect_no_file bk.h5
run "$TC_BIN/cache-inspect" --head 2 --json s.h5
printf '%s' "$out" >head-s.json
py "
import json
print([(r['label'], r['labels']['j']) for r in json.load(open('head-s.json'))['files'][0]['rows']])"
expect_out "[('0', '0'), ('-3.25', '1')]"
# gc-train's grouped objectives take classes: a float column serves when every value is a whole
# number (a CSV's 1.0, 2.0: those classes), else it is refused naming the first value that is not
# (a cast to int64 made -3.25 and -3.5 one class -3); an integer column of the same cache is taken.
run "$TC_BIN/gc-train" --cache s.h5 --embeddings flat --head linear:4 --batch-size 32 --steps 1 --out h.pt -q
expect_rc 65
expect_err "gc-train: error: s.h5: /labels ('s') holds -3.25 at row 1: grouped objectives take classes, whole numbers"
for column in c z; do
  run "$TC_BIN/gc-train" --cache s.h5 --embeddings flat --labels $column --head linear:4 --batch-size 32 --steps 1 \
    --out h.pt -q
  expect_rc 0
done
# The same on raw inputs (--data): an HDF5 dataset of whole float64 labels is classes, one with 0.5
# is refused (both were refused as not integers).
py "
import h5py, shutil
shutil.copy('$TC_DATA/images.h5', 'raw.h5')
with h5py.File('raw.h5', 'r+') as f:
    f['whole'] = f['labels'][()].astype('float64')
    f['half'] = f['labels'][()] + 0.5"
RAW=(--data raw.h5 --query images --encoder "$TC_DATA/cnn.pt" -b 40 --steps 1 --out h.pt -q)
run "$TC_BIN/gc-train" "${RAW[@]}" --labels whole
expect_rc 0
run "$TC_BIN/gc-train" "${RAW[@]}" --labels half
expect_rc 65
expect_err_re "^gc-train: error: raw\.h5: labels 'half' holds [0-9]\.5 at row 0: grouped objectives take classes, whole numbers$"

finish
