#!/usr/bin/env bash
# cache-fill --update (issue 45): when only the input's data changed, the rows a cache holds are
# copied and only new and changed ones encoded, and the result equals a full fill of the new input
# row for row (embeddings, labels, keys, row digests; by key): a new tar shard, an image folder with
# rows added, changed, removed and reordered at once, a CSV manifest of images by key, an HDF5 file,
# a .npy file, a slab and a JSON Lines text manifest by position, a class folder grown in every
# class, a class folder and a file renamed and tar samples given other keys (copied by their bytes). Only the new and changed rows are encoded, whatever batches they fall in, and every kept row
# is copied; embeddings equal a full fill's within the batch noise this machine shows (measured here,
# as the tool measures it). Labels, keys and the batch size change without a row encoded again. A
# data change without --update is refused naming it; other changes need --force; an interrupted
# update resumes to the bytes of an uninterrupted one, and one whose input changed again starts over
# under --update; an updated cache reads like any other (--verify, --export, gc-train).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/update_lib.sh"
export TRAINCACHE_SHM_PREFIX="tcupd-$$-"
trap 'rm -f /dev/shm/"$TRAINCACHE_SHM_PREFIX"*; rm -rf "$WORK"' EXIT
D=$TC_DATA
T=$TC_DATA/tokenizers

fixture_copy "$TC_DATA/tar-shards" "$TC_PYTHON" "$TC_SOURCE/tests/cli/tar_shards.py" make  # fixtures.tar
IMG=(--encoder cnn="$D/cnn.pt" --channels gray --resize 28 --center-crop 28 --batch-size 5 --threads 2 -q)

# ---- a new tar shard: its 10 samples encoded, the 30 cached copied -----------------------------
run "$TC_BIN/cache-fill" --input "$WORK/shards/{0000..0002}.tar" --features png --labels cls --out "$WORK/t.h5" "${IMG[@]}"
expect_rc 0
# Without --update a data change is refused, and the message says what to do.
run "$TC_BIN/cache-fill" --input "$WORK/shards/*.tar" --features png --labels cls --out "$WORK/t.h5" "${IMG[@]}"
expect_rc 73
expect_err "cache-fill: error: $WORK/t.h5: exists with another fingerprint (changed: input/content_xxh3, input/features/png/shape, input/keys/shape, input/labels/shape, input/rows): only the input's data, labels, keys or batch size changed; use --update to encode only the new and changed rows, or --force to encode every row"
run "$TC_BIN/cache-fill" --input "$WORK/shards/*.tar" --features png --labels cls --out "$WORK/t.h5" "${IMG[@]}" --update --json
expect_rc 0
expect_eq "$(update_json matched_by added changed removed unchanged rows_copied)" "10 key 10 0 0 30 30"
full_fill t --input "$WORK/shards/*.tar" --features png --labels cls "${IMG[@]}"
same_rows "$WORK/t.h5" "$WORK/t-full.h5" "$WORK/t-one.h5"
run "$TC_BIN/cache-inspect" --check "$WORK/t.h5"
expect_rc 0
# Nothing changed since: up to date, with or without --update.
run "$TC_BIN/cache-fill" --input "$WORK/shards/*.tar" --features png --labels cls --out "$WORK/t.h5" "${IMG[@]:0:12}" --update
expect_rc 0
expect_err_re "t\.h5: up to date"

# ---- an image folder: a file added, one rewritten, one removed, rows moved ---------------------
cp -r "$WORK/folder" "$WORK/f2"
run "$TC_BIN/cache-fill" --input "$WORK/f2" --out "$WORK/f.h5" "${IMG[@]}" --changes "$WORK/f.changes"
expect_rc 0
# A new cache's --changes: every row added and encoded, by its key.
py "
import json
c = [json.loads(l) for l in open('$WORK/f.changes')]
print(len(c), {(x['change'], x['encoded'], x['old_row']) for x in c}, [x['row'] for x in c] == list(range(40)), c[0]['key'])"
expect_out "40 {('added', True, None)} True cat/$(ls "$WORK/f2/cat" | head -1)"
first_cat=$(ls "$WORK/f2/cat" | head -1)
last_dog=$(ls "$WORK/f2/dog" | tail -1)
rm "$WORK/f2/cat/$first_cat"                        # removed: every later row moves up one
# Added, first of its class, and rewritten: images mirrored, so that no cached file has their bytes
# (a file with another cached file's bytes is copied from its row: renamed files, below).
py "
from PIL import Image
Image.open('$WORK/f2/dog/$last_dog').transpose(Image.FLIP_LEFT_RIGHT).save('$WORK/f2/cat/0-new.png')
Image.open('$WORK/folder/cat/$first_cat').transpose(Image.FLIP_LEFT_RIGHT).save('$WORK/f2/dog/$last_dog')"
run "$TC_BIN/cache-fill" --input "$WORK/f2" --out "$WORK/f.h5" "${IMG[@]}" --update --json --changes "$WORK/f.changes"
expect_rc 0
# Encoded: the new first cat and the rewritten dog, in one batch of their own; every other row copied.
expect_eq "$(update_json matched_by added changed removed unchanged rows_copied)" "2 key 1 1 1 38 38"
# --changes (issue 85, goal 4) names them by key and row, the removed cat by its old row, as the
# JSON's update.changes does.
expect_eq "$(cat "$WORK/f.changes")" '{"change":"added","row":0,"old_row":null,"key":"cat/0-new.png","encoded":true}
{"change":"changed","row":39,"old_row":39,"key":"dog/'"$last_dog"'","encoded":true}
{"change":"removed","row":null,"old_row":0,"key":"cat/'"$first_cat"'","encoded":false}'
expect_eq "$("$TC_PYTHON" -c "import json, sys; print(len(json.loads(sys.argv[1])['update']['changes']))" "$out")" 3
full_fill f --input "$WORK/f2" "${IMG[@]}"
same_rows "$WORK/f.h5" "$WORK/f-full.h5" "$WORK/f-one.h5"
run "$TC_BIN/cache-inspect" --json "$WORK/f.h5"
expect_rc 0
expect_out_has '"history":[{"encoded":40,"rows":40,"run":"fill"},{"added":1,"changed":1,"copied":38,"encoded":2,"kept":38,"matched_by":"key","removed":1,"rows":40,"run":"update","unchanged":38}],"row_digests":true'
run "$TC_BIN/cache-inspect" "$WORK/f.h5"
expect_out_has "history      1. fill: 40 rows, 40 encoded
               2. update: 40 rows, 2 encoded, 38 copied (by key: added 1, changed 1, removed 1, unchanged 38)"

# ---- an image folder renamed: a class folder and a file renamed, nothing encoded ---------------
# A file's row digest holds its name; its file digest (/row_file_digests) does not, so a renamed
# file finds its cached row by its bytes (moved), and its new label and key are the new input's.
cp -r "$WORK/f2" "$WORK/f3"
run "$TC_BIN/cache-fill" --input "$WORK/f3" --out "$WORK/rn.h5" "${IMG[@]}"
expect_rc 0
cp "$WORK/rn.h5" "$WORK/rn-old.h5"
mv "$WORK/f3/cat" "$WORK/f3/kitten"
mv "$WORK/f3/dog/$last_dog" "$WORK/f3/dog/renamed.png"
run "$TC_BIN/cache-fill" --input "$WORK/f3" --out "$WORK/rn.h5" "${IMG[@]}" --update --json
expect_rc 0
expect_eq "$(update_json matched_by added changed removed unchanged moved rows_copied)" "0 key 0 0 21 19 21 40"
run "$TC_BIN/cache-inspect" "$WORK/rn.h5"
expect_out_has "2. update: 40 rows, 0 encoded, 40 copied (by key: added 0, changed 0, removed 21, unchanged 19, moved 21)"
full_fill rn --input "$WORK/f3" "${IMG[@]}"
same_rows "$WORK/rn.h5" "$WORK/rn-full.h5" "$WORK/rn-one.h5"
# A cache from before file digests (the dataset removed): renamed files are encoded, as they were.
py "
import h5py
with h5py.File('$WORK/rn-old.h5', 'a') as f:
    del f['row_file_digests']"
run "$TC_BIN/cache-fill" --input "$WORK/f3" --out "$WORK/rn-old.h5" "${IMG[@]}" --update --json
expect_rc 0
expect_eq "$(update_json matched_by added changed removed unchanged moved rows_copied)" "21 key 21 0 21 19 0 19"
run "$TC_BIN/cache-inspect" --check "$WORK/rn-old.h5"
expect_rc 0
run "$TC_BIN/cache-inspect" --json "$WORK/rn-old.h5"  # the updated cache has them
expect_out_has '"row_digests":true,"row_file_digests":true'
# --check counts their rows as it counts /row_digests'.
cp "$WORK/rn.h5" "$WORK/rn-long.h5"
"$TC_PYTHON" -c "import h5py; h5py.File('$WORK/rn-long.h5', 'r+').attrs['rows'] = 41"
run "$TC_BIN/cache-inspect" --check "$WORK/rn-long.h5"
expect_rc 1
expect_out_has "/row_digests has 40 rows, expected 41; /row_file_digests has 40 rows, expected 41"

# A tar shard whose samples got other keys (members renamed, bytes the same): copied by their bytes.
cp "$WORK/shards/0000.tar" "$WORK/keys.tar"
run "$TC_BIN/cache-fill" --input "$WORK/keys.tar" --features png --labels cls --out "$WORK/rk.h5" "${IMG[@]}"
expect_rc 0
py "
import io, tarfile
members = [(m, tarfile.open('$WORK/keys.tar').extractfile(m).read()) for m in tarfile.open('$WORK/keys.tar')]
with tarfile.open('$WORK/keys.tar', 'w') as t:
    for m, data in members:
        m.name = 'new-' + m.name
        t.addfile(m, io.BytesIO(data))"
run "$TC_BIN/cache-fill" --input "$WORK/keys.tar" --features png --labels cls --out "$WORK/rk.h5" "${IMG[@]}" --update --json
expect_rc 0
expect_eq "$(update_json matched_by added removed moved rows_copied)" "0 key 0 10 10 10"

# ---- an HDF5 file by position: rows appended, one changed ---------------------------------------
H=(--encoder cnn="$D/cnn.pt" --features images --labels labels --batch-size 64 --threads 2 -q)
py "
import h5py
with h5py.File('$D/big.h5', 'r') as src, h5py.File('$WORK/small.h5', 'w') as out:
    out['images'] = src['images'][:1000]; out['labels'] = src['labels'][:1000]
with h5py.File('$D/big.h5', 'r') as src, h5py.File('$WORK/grown.h5', 'w') as out:
    images = src['images'][:1200]
    images[130] = 255 - images[130]   # row 130 changed: encoded again
    out['images'] = images; out['labels'] = src['labels'][:1200]
"
run "$TC_BIN/cache-fill" --input "$WORK/small.h5" --out "$WORK/h.h5" "${H[@]}"
expect_rc 0
cp "$WORK/grown.h5" "$WORK/small.h5"   # the same file name, new content
run "$TC_BIN/cache-fill" --input "$WORK/small.h5" --out "$WORK/h.h5" "${H[@]}" --update --json
expect_rc 0
# Row 130 and the 200 new rows: encoded in batches of their own; rows 960..999 are copied, though a
# full fill's batch holds them beside the first new rows.
expect_eq "$(update_json matched_by added changed removed unchanged rows_copied)" "201 position 200 1 0 999 999"
# By position: rows without keys, row 130 changed in place, rows 1000-1199 added.
py "
import json
c = json.loads(open('$WORK/.update.json').read())['update']['changes']
print(c[0], len(c), {x['change'] for x in c[1:]}, [x['row'] for x in c[1:]] == list(range(1000, 1200)),
      {x['key'] for x in c})"
expect_out "{'change': 'changed', 'row': 130, 'old_row': 130, 'key': None, 'encoded': True} 201 {'added'} True {None}"
full_fill h --input "$WORK/grown.h5" "${H[@]}"
same_rows "$WORK/h.h5" "$WORK/h-full.h5" "$WORK/h-one.h5"

# ---- a JSON Lines manifest of text by position: lines appended --------------------------------
# Batches as read (--length-window 0): a length window (16 batches by default) is encoded whole.
py "
import json
lines = [json.dumps({'text': 'row %d says %s' % (i, 'hello world ' * (i % 7))}) for i in range(300)]
open('$WORK/t200.jsonl', 'w').write('\n'.join(lines[:200]) + '\n')
open('$WORK/t300.jsonl', 'w').write('\n'.join(lines) + '\n')
"
TXT=(--text text --encoder "$D/text4k.pt" --tokenizer "$T/bert-uncased.json" --max-length 32 -b 50 --length-window 0 --threads 2 -q)
cp "$WORK/t200.jsonl" "$WORK/texts.jsonl"
run "$TC_BIN/cache-fill" --input "$WORK/texts.jsonl" --out "$WORK/x.h5" "${TXT[@]}"
expect_rc 0
cp "$WORK/t300.jsonl" "$WORK/texts.jsonl"
run "$TC_BIN/cache-fill" --input "$WORK/texts.jsonl" --out "$WORK/x.h5" "${TXT[@]}" --update --json
expect_rc 0
expect_eq "$(update_json matched_by added changed removed unchanged)" "100 position 100 0 0 200"
full_fill x --input "$WORK/t300.jsonl" "${TXT[@]}"
same_rows "$WORK/x.h5" "$WORK/x-full.h5" "$WORK/x-one.h5"
# A line inserted at the top pushes every row down one place: each is found by its content in the
# cache row above and copied (moved), and only the new line (row 0, changed by position) is encoded:
# all 301 were.
{ printf '{"text": "a new first line"}\n'; cat "$WORK/t300.jsonl"; } > "$WORK/texts.jsonl"
run "$TC_BIN/cache-fill" --input "$WORK/texts.jsonl" --out "$WORK/x.h5" "${TXT[@]}" --update --json
expect_rc 0
expect_eq "$(update_json matched_by added changed removed unchanged moved rows_copied)" "1 position 0 1 0 0 300 300"
cp "$WORK/texts.jsonl" "$WORK/t301.jsonl"
full_fill x301 --input "$WORK/t301.jsonl" "${TXT[@]}"
same_rows "$WORK/x.h5" "$WORK/x301-full.h5" "$WORK/x301-one.h5"

# ---- a CSV manifest of images by key: lines reordered, one removed, one added -------------------
py "
import os
rows = ['folder/%s/%s,%s,k-%s-%s' % (c, f, c, c, f) for c in sorted(os.listdir('$WORK/folder'))
        for f in sorted(os.listdir('$WORK/folder/' + c))]
open('$WORK/m1.csv', 'w').write('file,class,id\n' + '\n'.join(rows[:30]) + '\n')
new = rows[10:20] + rows[:9] + rows[20:31]    # rows 0..9 moved after 10..19, row 9 removed, row 30 added
open('$WORK/m2.csv', 'w').write('file,class,id\n' + '\n'.join(new) + '\n')
"
M=(--features file --labels class --key id "${IMG[@]}")
cp "$WORK/m1.csv" "$WORK/m.csv"
run "$TC_BIN/cache-fill" --input "$WORK/m.csv" --out "$WORK/m.h5" "${M[@]}"
expect_rc 0
cp "$WORK/m2.csv" "$WORK/m.csv"
run "$TC_BIN/cache-fill" --input "$WORK/m.csv" --out "$WORK/m.h5" "${M[@]}" --update --json
expect_rc 0
# Only the added row is encoded; the 29 kept rows are copied wherever they moved.
expect_eq "$(update_json matched_by added changed removed unchanged rows_copied)" "1 key 1 0 1 29 29"
full_fill m --input "$WORK/m2.csv" "${M[@]}"
same_rows "$WORK/m.h5" "$WORK/m-full.h5" "$WORK/m-one.h5"

# ---- a .npy file by position: rows appended ------------------------------------------------------
py "
import h5py, numpy as np
with h5py.File('$D/big.h5', 'r') as f: x = f['images'][:700]
np.save('$WORK/x500.npy', x[:500]); np.save('$WORK/x700.npy', x)
"
N=(--encoder cnn="$D/cnn.pt" --batch-size 100 --threads 2 -q)
cp "$WORK/x500.npy" "$WORK/x.npy"
run "$TC_BIN/cache-fill" --input "$WORK/x.npy" --out "$WORK/n.h5" "${N[@]}"
expect_rc 0
cp "$WORK/x700.npy" "$WORK/x.npy"
run "$TC_BIN/cache-fill" --input "$WORK/x.npy" --out "$WORK/n.h5" "${N[@]}" --update --json
expect_rc 0
expect_eq "$(update_json matched_by added changed removed unchanged rows_copied)" "200 position 200 0 0 500 500"
full_fill n --input "$WORK/x700.npy" "${N[@]}"
same_rows "$WORK/n.h5" "$WORK/n-full.h5" "$WORK/n-one.h5"

# ---- a slab by position: the same rows but one, in another slab -------------------------------
py "
import h5py
with h5py.File('$D/images.h5', 'r') as src, h5py.File('$WORK/img2.h5', 'w') as out:
    images = src['images'][:300]
    images[10] = 255 - images[10]
    out['images'] = images
"
# slab_of H5: the slab "g" made again, holding the images of H5.
slab_of() {
  "$TC_BIN/shm-cache" rm g 2>/dev/null
  "$TC_BIN/shm-cache" create g --len 300 --dims 1,28,28 --slots 300 -q
  "$TC_BIN/shm-cache" fill g --from "$1" --dataset images --rows 0:300 -q
}
S=(--input shm:g --encoder cnn="$D/cnn.pt" -b 50 --threads 2 -q)
slab_of "$D/images.h5"
run "$TC_BIN/cache-fill" "${S[@]}" --out "$WORK/s.h5"
expect_rc 0
slab_of "$WORK/img2.h5"
run "$TC_BIN/cache-fill" "${S[@]}" --out "$WORK/s.h5" --update --json
expect_rc 0
expect_eq "$(update_json matched_by added changed removed unchanged rows_copied)" "1 position 0 1 0 299 299"
full_fill s "${S[@]}"
same_rows "$WORK/s.h5" "$WORK/s-full.h5" "$WORK/s-one.h5"

# ---- an updated cache reads like any other: --verify, --export, gc-train ------------------------
run "$TC_BIN/cache-inspect" --verify 8 "$WORK/f.h5"
expect_rc 0
run "$TC_BIN/cache-inspect" "$WORK/t.h5" --export npy "$WORK/export" -q
expect_rc 0
py "
import h5py, numpy as np
print(np.array_equal(np.load('$WORK/export/cnn/cnn_00000.npy'), h5py.File('$WORK/t-full.h5', 'r')['embeddings/cnn'][()]))"
expect_out "True"
run "$TC_BIN/gc-train" --cache "$WORK/h.h5" --embeddings cnn --head mlp:32,16 --batch-size 64 --chunk-size 16 \
  --steps 2 --optimizer sgd --lr 0.1 --seed 1 --threads 2 -q --json
expect_rc 0
expect_out_has '"steps":2'

# ---- what --update refuses ----------------------------------------------------------------------
# Another encoder is not a data change.
run "$TC_BIN/cache-fill" --input "$WORK/shards/*.tar" --features png --labels cls --out "$WORK/t.h5" \
  --encoder cnn="$D/cnn_other.pt" "${IMG[@]:2}" --update
expect_rc 73
expect_err_re "t\.h5: exists with another fingerprint \(changed: encoders/cnn/sha256\): --update keeps rows only when the encoders, preprocessing and options are unchanged; use --force to encode every row$"
# --update --force (issue 85, goal 2): what --update refuses is filled again, said at the start and
# in --json; an up-to-date cache is left as it is, its time too; a data change is an update.
cp -p "$WORK/t.h5" "$WORK/t-before.h5"
run "$TC_BIN/cache-fill" --input "$WORK/shards/*.tar" --features png --labels cls --out "$WORK/t.h5" "${IMG[@]:0:12}" \
  --update --force
expect_rc 0
expect_err_re "t\.h5: up to date"
expect_eq "$(stat -c %Y "$WORK/t.h5")" "$(stat -c %Y "$WORK/t-before.h5")" "an up-to-date cache's time"
expect_same "$WORK/t.h5" "$WORK/t-before.h5"
run "$TC_BIN/cache-fill" --input "$WORK/shards/*.tar" --features png --labels cls --out "$WORK/t.h5" \
  --encoder cnn="$D/cnn_other.pt" "${IMG[@]:2:10}" --update --force --json
expect_rc 0
expect_err "cache-fill: warning: $WORK/t.h5: every row is encoded again: exists with another fingerprint (changed: encoders/cnn/sha256) (--update --force)"
expect_eq "$("$TC_PYTHON" -c "import json, sys; r = json.loads(sys.argv[1]); print(r['rows_encoded'], r['update'], r['refilled'])" "$out")" \
  "40 None exists with another fingerprint (changed: encoders/cnn/sha256)"
run "$TC_BIN/cache-fill" --input "$WORK/shards/*.tar" --features png --labels cls --out "$WORK/t-other.h5" \
  --encoder cnn="$D/cnn_other.pt" "${IMG[@]:2}"
expect_rc 0
py "
import h5py, numpy as np
a, b = (h5py.File('$WORK/' + n, 'r') for n in ('t.h5', 't-other.h5'))
print(np.array_equal(a['embeddings/cnn'][()], b['embeddings/cnn'][()]), np.array_equal(a['keys'][()], b['keys'][()]))"
expect_out "True True"
run "$TC_BIN/cache-fill" --input "$WORK/f2" --out "$WORK/f.h5" "${IMG[@]}" --update --shard 0/2
expect_rc 64
expect_err_has "cache-fill: error: --update: cannot be combined with --shard"
# A cache merged from shards (its row digests merged with the rest) is updated by one process as a
# one-process fill of the job's rows would be: the shards' rows copied, the rows past them encoded.
for i in 0 1; do
  tool "$TC_BIN/cache-fill" --input "$WORK/small.h5" --out "$WORK/sh.h5" "${H[@]}" --rows 0:1000 --shard $i/2
done
run "$TC_BIN/cache-fill" merge --out "$WORK/sh.h5" "$WORK"/sh.h5.shard-*
expect_rc 0
cp "$WORK/sh.h5" "$WORK/sh-other.h5"
cp "$WORK/sh.h5" "$WORK/sh-other-copy.h5"
cp "$WORK/sh.h5" "$WORK/sh-nodigests.h5"
run "$TC_BIN/cache-fill" --input "$WORK/small.h5" --out "$WORK/sh.h5" "${H[@]}" --update --json
expect_rc 0
expect_eq "$(update_json matched_by added changed removed unchanged rows_copied)" "200 position 200 0 0 1000 1000"
same_rows "$WORK/sh.h5" "$WORK/h-full.h5" "$WORK/h-one.h5"
run "$TC_BIN/cache-inspect" "$WORK/sh.h5"
expect_out_has "3. merge: 1000 rows, from 2 shards
               4. update: 1200 rows, 200 encoded, 1000 copied (by position: added 200, changed 0, removed 0, unchanged 1000)"
# Another encoder: refused, naming what differs; a merged cache without row digests (merged before
# they were merged): refused as any cache without them. Neither file changes.
run "$TC_BIN/cache-fill" --input "$WORK/small.h5" --out "$WORK/sh-other.h5" --encoder cnn="$D/cnn_other.pt" "${H[@]:2}" --update
expect_rc 73
expect_err "cache-fill: error: $WORK/sh-other.h5: is a cache merged from shards (cache-fill merge) of another job (changed: encoders/cnn/sha256): --update keeps rows only when the encoders, preprocessing and options are unchanged; use --force to fill it again"
# Its rows are read through the shards: with one gone, the update is refused naming it.
mv "$WORK/sh.h5.shard-1-of-2" "$WORK/away.h5"
# (the updated cache reads nothing from them: its rows are its own)
run "$TC_BIN/cache-inspect" "$WORK/sh.h5" --check
expect_rc 0
py "
import h5py
with h5py.File('$WORK/sh.h5', 'r') as f:
    print(f['embeddings/cnn'].is_virtual, f['embeddings/cnn'][999].shape)"
expect_out "False (32,)"
run "$TC_BIN/cache-fill" --input "$WORK/small.h5" --out "$WORK/sh-other.h5" "${H[@]}" --update
expect_rc 73
expect_err "cache-fill: error: $WORK/sh-other.h5: exists and is not a readable traincache cache (virtual source $WORK/sh.h5.shard-1-of-2 is missing (no such file or directory)); use --force to overwrite it"
mv "$WORK/away.h5" "$WORK/sh.h5.shard-1-of-2"
py "
import h5py
with h5py.File('$WORK/sh-nodigests.h5', 'a') as f: del f['row_digests']"
cp "$WORK/sh-nodigests.h5" "$WORK/sh-nodigests-copy.h5"
run "$TC_BIN/cache-fill" --input "$WORK/small.h5" --out "$WORK/sh-nodigests.h5" "${H[@]}" --update
expect_rc 73
expect_err "cache-fill: error: $WORK/sh-nodigests.h5: holds no row digests (made before cache-fill kept them, or merged from shards before 2026-12-04), so --update cannot tell which rows changed; use --force to encode every row"
expect_eq "$(cmp -s "$WORK/sh-nodigests.h5" "$WORK/sh-nodigests-copy.h5" && echo same)" same
expect_eq "$(cmp -s "$WORK/sh-other.h5" "$WORK/sh-other-copy.h5" && echo same)" same
# A cache without row digests (an older version's, or merged) cannot be updated; nothing changes.
cp "$WORK/h-full.h5" "$WORK/old.h5"
py "
import h5py
with h5py.File('$WORK/old.h5', 'a') as f: del f['row_digests']
"
cp "$WORK/old.h5" "$WORK/old-copy.h5"
run "$TC_BIN/cache-fill" --input "$WORK/grown.h5" --rows 0:1100 --out "$WORK/old.h5" "${H[@]}" --update
expect_rc 73
expect_err "cache-fill: error: $WORK/old.h5: holds no row digests (made before cache-fill kept them, or merged from shards before 2026-12-04), so --update cannot tell which rows changed; use --force to encode every row"
expect_same "$WORK/old.h5" "$WORK/old-copy.h5"
# With no cache yet, --update is a full fill.
run "$TC_BIN/cache-fill" --input "$WORK/grown.h5" --out "$WORK/new.h5" "${H[@]}" --update
expect_rc 0
expect_same "$WORK/new.h5" "$WORK/h-full.h5"

# ---- an interrupted update resumes to the bytes of an uninterrupted one ------------------------
run "$TC_BIN/cache-fill" --input "$D/big.h5" --rows 0:1500 --out "$WORK/r.h5" "${H[@]}"
expect_rc 0
cp "$WORK/r.h5" "$WORK/r-ref.h5"
run "$TC_BIN/cache-fill" --input "$D/big.h5" --rows 0:6000 --out "$WORK/r-ref.h5" "${H[@]}" --update
expect_rc 0
"$TC_BIN/cache-fill" --input "$D/big.h5" --rows 0:6000 --out "$WORK/r.h5" "${H[@]:0:10}" --commit-rows 128 \
  --update 2>/dev/null &
pid=$!
for _ in $(seq 1 1500); do
  c=$(grep -o '"committed_rows": [0-9]*' "$WORK/r.h5.partial/journal.json" 2>/dev/null | grep -o '[0-9]*$')
  if [ -n "$c" ] && [ "$c" -ge 2000 ]; then break; fi
  sleep 0.01
done
kill -INT "$pid"
wait "$pid"
expect_eq "$?" 130 "the interrupted update's exit status"
run "$TC_BIN/cache-fill" --input "$D/big.h5" --rows 0:6000 --out "$WORK/r.h5" "${H[@]}" --update
expect_rc 0
expect_same "$WORK/r.h5" "$WORK/r-ref.h5"

# ---- an update whose input changed again while it was interrupted: --update starts it over ------
run "$TC_BIN/cache-fill" --input "$D/big.h5" --rows 0:500 --out "$WORK/r.h5" "${H[@]}" --force
expect_rc 0
"$TC_BIN/cache-fill" --input "$D/big.h5" --rows 0:4000 --out "$WORK/r.h5" "${H[@]:0:10}" --commit-rows 128 \
  --update 2>/dev/null &
pid=$!
wait_committed "$WORK/r.h5.partial" 256
kill -INT "$pid"
wait "$pid"
expect_eq "$?" 130 "the interrupted update's exit status"
expect_file "$WORK/r.h5.partial/journal.json"
cp "$WORK/r.h5" "$WORK/r2-ref.h5"
run "$TC_BIN/cache-fill" --input "$D/big.h5" --rows 0:4500 --out "$WORK/r2-ref.h5" "${H[@]}" --update
expect_rc 0
run "$TC_BIN/cache-fill" --input "$D/big.h5" --rows 0:4500 --out "$WORK/r.h5" "${H[@]:0:10}" --update
expect_rc 0
expect_err_re "cache-fill: warning: $WORK/r.h5.partial: discarded the progress of an earlier update, whose input or cache has changed since \\([0-9]+ rows\\)"
expect_same "$WORK/r.h5" "$WORK/r2-ref.h5"
expect_no_file "$WORK/r.h5.partial"

# ---- labels, keys and the batch size change without a row encoded again ------------------------
NL=(--encoder cnn="$D/cnn.pt" --features images --batch-size 64 --threads 2 -q)
run "$TC_BIN/cache-fill" --input "$WORK/grown.h5" --out "$WORK/l.h5" "${NL[@]}"
expect_rc 0
cp "$WORK/l.h5" "$WORK/l-before.h5"
run "$TC_BIN/cache-fill" --input "$WORK/grown.h5" --out "$WORK/l.h5" "${NL[@]}" --labels labels --update --json
expect_rc 0
expect_eq "$(update_json matched_by added changed removed unchanged rows_copied)" "0 position 0 0 0 1200 1200"
py "
import h5py, numpy as np
a, b, src = h5py.File('$WORK/l.h5', 'r'), h5py.File('$WORK/l-before.h5', 'r'), h5py.File('$WORK/grown.h5', 'r')
print(np.array_equal(a['embeddings/cnn'][()], b['embeddings/cnn'][()]), np.array_equal(a['labels'][()], src['labels'][()]))"
expect_out "True True"
# And keys, then another batch size with rows added and one changed: only those are encoded.
run "$TC_BIN/cache-fill" --input "$WORK/grown.h5" --out "$WORK/l.h5" "${NL[@]}" --labels labels --key labels \
  --update --json
expect_rc 0
expect_eq "$(update_json matched_by rows_copied)" "0 position 1200"
run "$TC_BIN/cache-fill" --input "$D/big.h5" --rows 0:1300 --out "$WORK/l.h5" "${NL[@]}" --labels labels -b 100 \
  --update --json
expect_rc 0
expect_eq "$(update_json matched_by added changed removed unchanged rows_copied)" "101 position 100 1 0 1199 1199"
full_fill l --input "$D/big.h5" --rows 0:1300 "${NL[@]}" --labels labels -b 100
same_rows "$WORK/l.h5" "$WORK/l-full.h5" "$WORK/l-one.h5"

# ---- a class folder that grew in every class: only the new files are encoded -------------------
py "
import os, shutil
os.makedirs('$WORK/cls')
names = sorted(os.listdir('$WORK/folder/cat')) + sorted(os.listdir('$WORK/folder/dog'))
for c in ('cat', 'dog'):
    os.makedirs('$WORK/cls/' + c)
    for i, n in enumerate(sorted(os.listdir('$WORK/folder/' + c))):
        if i % 4 != 1:   # every fourth file of each class arrives later
            shutil.copy('$WORK/folder/%s/%s' % (c, n), '$WORK/cls/%s/%s' % (c, n))
"
run "$TC_BIN/cache-fill" --input "$WORK/cls" --out "$WORK/c.h5" "${IMG[@]}"
expect_rc 0
cp -r "$WORK/folder/." "$WORK/cls/"
run "$TC_BIN/cache-fill" --input "$WORK/cls" --out "$WORK/c.h5" "${IMG[@]}" --update --json
expect_rc 0
expect_eq "$(update_json matched_by added changed removed unchanged rows_copied)" "10 key 10 0 0 30 30"
full_fill c --input "$WORK/cls" "${IMG[@]}"
same_rows "$WORK/c.h5" "$WORK/c-full.h5" "$WORK/c-one.h5"

finish
