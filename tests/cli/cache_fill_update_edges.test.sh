#!/usr/bin/env bash
# cache-fill --update at its edges (issue 45): rows that --on-error skip left out (an unreadable
# image fixed, another broken) come out as a full fill's, /skipped included; .npz members matched
# by key with rows removed, moved, changed and added; an output another run holds exits 75 and
# leaves the cache as it was.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/update_lib.sh"
trap 'rm -rf "$WORK"' EXIT
D=$TC_DATA

# skipped_rows CACHE: the cache's /skipped rows (None without any).
skipped_rows() {
  py "
import h5py
f = h5py.File('$1', 'r')
print('skipped', f['skipped/rows'][()].tolist() if 'skipped' in f else None)"
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
# Encoded: the added file and the two rewritten ones (the fixed one was skipped before).
expect_eq "$(update_json matched_by added changed removed kept rows_copied)" "3 key 1 2 0 10 10" "the folder's tally"
full_fill i --input "$WORK/imgs" "${IMG[@]}"
same_rows "$WORK/i.h5" "$WORK/i-full.h5" "$WORK/i-one.h5"
skipped_rows "$WORK/i.h5"
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
cp "$WORK/z.h5" "$WORK/z-old.h5"
run "$TC_BIN/cache-fill" --input "$WORK/in.npz" --out "$WORK/z.h5" "${NPZ[@]}" --update --json
expect_rc 0
expect_eq "$(update_json matched_by added changed removed kept rows_copied)" "101 key 100 1 10 189 189" \
  "the .npz file's tally"
full_fill z --input "$WORK/new.npz" "${NPZ[@]}"
same_rows "$WORK/z.h5" "$WORK/z-full.h5" "$WORK/z-one.h5"
# The update encoded its rows with the decisions of the old cache's first batch, which it records
# (cache-fill.md, "Decisions the rows share"), not with those of a first batch of its own; a full
# fill of the new input checks its own first batch (rows 40-71 of the old ones, not 0-31), so its
# figures differ wherever the optimised module's difference is not 0 on this machine.
py "
import h5py
old, upd, full = (h5py.File('$WORK/' + n, 'r')['embeddings/cnn'].attrs for n in ('z-old.h5', 'z.h5', 'z-full.h5'))
keys = ['inference', 'optimize_max_abs_diff', 'batch_max_abs_diff']
print('kept' if all(upd[k] == old[k] for k in keys) else [(k, old[k], upd[k]) for k in keys])
print('the full fill decided', 'alike' if all(full[k] == old[k] for k in keys) else 'otherwise')
"
expect_rc 0
expect_out_re "^kept"

# ---- a damaged cache whose /keys is shorter than its rows: 65 naming it, the cache untouched -----
cp "$WORK/z.h5" "$WORK/zk.h5"
py "
import h5py
with h5py.File('$WORK/zk.h5', 'a') as f:
    keys = f['keys'][:100]
    del f['keys']
    f['keys'] = keys
    f['keys'].attrs['source'] = 'ids'
"
cp "$WORK/zk.h5" "$WORK/zk-before.h5"
cp "$WORK/old.npz" "$WORK/in.npz"
run "$TC_BIN/cache-fill" --input "$WORK/in.npz" --out "$WORK/zk.h5" "${NPZ[@]}" --update
expect_rc 65
expect_err "cache-fill: error: $WORK/zk.h5: the cache is damaged (/keys has 100 rows, expected 290); use --force instead of --update to fill it again"
expect_same "$WORK/zk.h5" "$WORK/zk-before.h5"

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
