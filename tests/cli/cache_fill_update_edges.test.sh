#!/usr/bin/env bash
# cache-fill --update at its edges (issue 45): rows that --on-error skip left out (an unreadable
# image fixed, another broken) come out as a full fill's, /skipped included; .npz members matched
# by key with rows removed, moved, changed and added; an output another run holds exits 75 and
# leaves the cache as it was.
source "$(dirname "$0")/lib.sh"
trap 'rm -rf "$WORK"' EXIT
D=$TC_DATA

# same_cache A B: the two caches hold the same rows: row digests, labels, keys and /skipped (rows
# and reasons) to the bit, embeddings to the bit or, where MKL gives a row's last bits by its batch
# (pip's LibTorch), within 1e-5.
same_cache() {
  py "
import h5py, numpy as np
a, b = h5py.File('$1', 'r'), h5py.File('$2', 'r')
names = ['row_digests', 'labels', 'keys', 'skipped/rows', 'skipped/reasons']
names += ['embeddings/' + e for e in b['embeddings']]
for name in names:
    if (name in a) != (name in b):
        print('only one has', name); continue
    if name not in b:
        continue
    x, y = a[name][()], b[name][()]
    if not (np.array_equal(x, y) or (name.startswith('emb') and np.allclose(x, y, rtol=1e-5, atol=1e-6))):
        print(name, 'differs')
print('skipped', a['skipped/rows'][()].tolist() if 'skipped' in a else None)
"
  expect_rc 0
}
tally() {
  "$TC_PYTHON" -c "
import json, sys
u = json.loads(sys.argv[1])['update']
print(u['matched_by'], u['added'], u['changed'], u['removed'], u['kept'])" "$out"
}

# ---- an image folder with unreadable files: skipped rows are read again -------------------------
py "
import os
from PIL import Image
for c in ('cat', 'dog'):
    os.makedirs('$WORK/imgs/' + c)
    for i in range(6):
        Image.new('L', (28, 28), 20 * i + (100 if c == 'dog' else 0)).save(f'$WORK/imgs/{c}/{i}.png')
open('$WORK/imgs/cat/3.png', 'wb').write(b'not a png')
"
expect_rc 0
IMG=(--encoder cnn="$D/cnn.pt" --channels gray --resize 28 --batch-size 4 --threads 2 --on-error skip -q)
run "$TC_BIN/cache-fill" --input "$WORK/imgs" --out "$WORK/i.h5" "${IMG[@]}"
expect_rc 0
cp "$WORK/imgs/cat/2.png" "$WORK/imgs/cat/3.png"    # the unreadable file fixed
printf 'truncated' > "$WORK/imgs/dog/5.png"         # a readable one broken
cp "$WORK/imgs/dog/0.png" "$WORK/imgs/dog/6.png"    # one added
run "$TC_BIN/cache-fill" --input "$WORK/imgs" --out "$WORK/i.h5" "${IMG[@]}" --update --json
expect_rc 0
expect_eq "$(tally)" "key 1 2 0 10" "the folder's tally"
run "$TC_BIN/cache-fill" --input "$WORK/imgs" --out "$WORK/i-full.h5" "${IMG[@]}"
expect_rc 0
same_cache "$WORK/i.h5" "$WORK/i-full.h5"
expect_eq "$out" "skipped [11]" "the update's skipped rows (dog/5.png)"

# ---- .npz members by key: rows removed, moved, changed and added --------------------------------
py "
import h5py, numpy as np
with h5py.File('$D/images.h5', 'r') as f:
    x, y = f['images'][:300], f['labels'][:300]
ids = np.arange(1000, 1300)
np.savez('$WORK/old.npz', images=x[:200], labels=y[:200], ids=ids[:200])
order = list(range(40, 300)) + list(range(0, 30))   # 30..39 removed, 0..29 last, 200..299 added
x2 = x[order]
x2[3] = 255 - x2[3]                                 # id 1043 rewritten
np.savez_compressed('$WORK/new.npz', images=x2, labels=y[order], ids=ids[order])
"
expect_rc 0
NPZ=(--features images --labels labels --key ids --encoder cnn="$D/cnn.pt" --batch-size 32 --threads 2 -q)
cp "$WORK/old.npz" "$WORK/in.npz"
run "$TC_BIN/cache-fill" --input "$WORK/in.npz" --out "$WORK/z.h5" "${NPZ[@]}"
expect_rc 0
cp "$WORK/new.npz" "$WORK/in.npz"
run "$TC_BIN/cache-fill" --input "$WORK/in.npz" --out "$WORK/z.h5" "${NPZ[@]}" --update --json
expect_rc 0
expect_eq "$(tally)" "key 100 1 10 189" "the .npz file's tally"
run "$TC_BIN/cache-fill" --input "$WORK/new.npz" --out "$WORK/z-full.h5" "${NPZ[@]}"
expect_rc 0
same_cache "$WORK/z.h5" "$WORK/z-full.h5"
expect_eq "$out" "skipped None" "the .npz caches agree"

# ---- an output another run holds: 75, the cache untouched ----------------------------------------
cp "$WORK/z.h5" "$WORK/z-before.h5"
cp "$WORK/old.npz" "$WORK/in.npz"
hold_lock "$WORK/z.h5.lock" 4545
run "$TC_BIN/cache-fill" --input "$WORK/in.npz" --out "$WORK/z.h5" "${NPZ[@]}" --update
expect_rc 75
expect_err "cache-fill: error: $WORK/z.h5: in use by another cache-fill run (pid 4545); try again when it has finished"
expect_same "$WORK/z.h5" "$WORK/z-before.h5"
expect_no_file "$WORK/z.h5.partial"
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

finish
