#!/usr/bin/env bash
# shm-cache: create, fill (also 4 processes at once), list, stat, get, repair, rm, df; errors.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
export TRAINCACHE_SHM_PREFIX="tccli-$$-"
trap 'rm -f /dev/shm/"$TRAINCACHE_SHM_PREFIX"*; rm -rf "$WORK"' EXIT
S="$TC_BIN/shm-cache"

run "$S" create img --len 300 --dims 1,28,28 --dtype uint8 --slots 200
expect_rc 0
expect_err "shm-cache: created img: fixed [1,28,28] uint8, 300 indices, 200 cacheable, 158.69 KiB (/dev/shm/${TRAINCACHE_SHM_PREFIX}img)"
expect_file "/dev/shm/${TRAINCACHE_SHM_PREFIX}img"
expect_eq "$(stat -c %a "/dev/shm/${TRAINCACHE_SHM_PREFIX}img")" "600" "default mode"

# Four fill processes at once on overlapping rows.
for r in 0:150 50:200 100:300 0:300; do
  "$S" fill img --from "$D/images.h5" --dataset images --rows "$r" --workers 2 -q &
done
wait
run "$S" stat img --json
expect_rc 0
echo "$out" > "$WORK/stat.json"
# Read the object with numpy through the documented layout and compare with the source rows.
py "
import json, h5py, numpy as np
j = json.load(open('$WORK/stat.json'))['slab']
raw = np.fromfile(j['path'], dtype=np.uint8)
states = raw[j['offsets']['states']:j['offsets']['states'] + 8 * j['slots']].view(np.uint64) & 0xff
data = raw[j['offsets']['data']:j['offsets']['data'] + j['item_bytes'] * j['slots']].reshape(j['slots'], 1, 28, 28)
src = h5py.File('$D/images.h5', 'r')['images'][:200]
print(j['counts']['filled'], j['counts']['writing'], int((states == 2).sum()), bool((data == src).all()))
"
expect_out "200 0 200 True"

"$S" get img 7 > "$WORK/item7" && _ok || _fail "get img 7"
py "import h5py, sys; sys.stdout.write(h5py.File('$D/images.h5', 'r')['images'][7].tobytes().hex())"
want=$out
run bash -c "'$S' get img 7 | od -An -tx1 -v | tr -d ' \n'"
expect_out "$want"
# 74: the item cannot be written to stdout.
run bash -c "'$S' get img 7 > /dev/full"
expect_rc 74
expect_err "shm-cache: error: stdout: write error"
run "$S" get img 250
expect_rc 1
expect_no_out
expect_err "shm-cache: error: img: index 250: miss (not cacheable)"
run "$S" get img 250 --json
expect_rc 1
expect_out_has '"state":"not cacheable"'
# At or past the slab's length there is no item: a usage error, as shm-cache.md says (it was a miss).
run "$S" get img 300
expect_rc 64
expect_no_out
expect_err "shm-cache: error: index: 300 is beyond the slab's 300 items (0..299)"

run "$S" list
expect_rc 0
expect_out_re $'^NAME +LAYOUT +SIZE +FILLED +CREATOR +AGE\nimg +fixed \\[1,28,28\\] uint8 +158.69 KiB +100.0%'
run "$S" repair img
expect_rc 0
expect_err "shm-cache: img: 0 slots left by dead writers returned to empty"

# Variable-size items from a variable-length HDF5 dataset.
"$TC_PYTHON" -c "
import h5py, numpy as np
with h5py.File('$WORK/seq.h5', 'w') as f:
    d = f.create_dataset('tokens', (50,), dtype=h5py.vlen_dtype(np.int64))
    for i in range(50): d[i] = np.arange(i % 7 + 1, dtype=np.int64) * i
"
run "$S" create seq --len 50 --variable --dtype int64 --limit 1KiB --mode 0640
expect_rc 0
expect_eq "$(stat -c %a "/dev/shm/${TRAINCACHE_SHM_PREFIX}seq")" "640" "--mode"
run "$S" fill seq --from "$WORK/seq.h5" --dataset tokens --json
expect_rc 0
fill_json=$out
# Greedy first-fit in row order into a 1 KiB arena (items of (i % 7 + 1) int64 values).
py "
used = stored = 0
for i in range(50):
    b = (i % 7 + 1) * 8
    if used + b <= 1024: used += b; stored += 1
print(stored)
"
expected_stored=$out
out=$fill_json
expect_out_has "\"stored\":$expected_stored"
run bash -c "'$S' get seq 13 | od -An -td8 -v | tr -s ' \n' '  ' | sed 's/^ //; s/ \$//'"
expect_out "0 13 26 39 52 65 78"

# Errors, each with its exit code; nothing is created by a refused create.
run "$S" create img --len 3 --dims 1 --slots 3
expect_rc 73
expect_err "shm-cache: error: img: a slab with this name exists"
run "$S" create huge --len 1000000 --dims 1000000 --limit 100TiB
expect_rc 73
expect_err_re "^shm-cache: error: huge: needs [0-9.]+ GiB but /dev/shm has [0-9.]+ [GMK]iB free$"
expect_no_file "/dev/shm/${TRAINCACHE_SHM_PREFIX}huge"
run "$S" create ../etc --len 3 --dims 1 --slots 3
expect_rc 64
expect_err "shm-cache: error: '../etc': invalid slab name (use 1-200 of A-Z a-z 0-9 . _ -)"
run "$S" create x --len 3 --dims 1 --limit lots
expect_rc 64
expect_err "shm-cache: error: 'lots': not a size (examples: 512MiB, 2GiB, 1000000)"
run "$S" stat nope
expect_rc 69
expect_err "shm-cache: error: nope: no such slab in /dev/shm"
head -c 10000 /dev/urandom > "/dev/shm/${TRAINCACHE_SHM_PREFIX}junk"
run "$S" stat junk
expect_rc 65
expect_err "shm-cache: error: junk: not a traincache slab (bad magic)"
cp "/dev/shm/${TRAINCACHE_SHM_PREFIX}img" "/dev/shm/${TRAINCACHE_SHM_PREFIX}cut"
truncate -s 9000 "/dev/shm/${TRAINCACHE_SHM_PREFIX}cut"
run "$S" get cut 1
expect_rc 65
expect_err "shm-cache: error: cut: corrupt slab header (sizes and offsets do not match the object)"
run "$S" fill img --from "$D/images.h5" --dataset vec
expect_rc 65
expect_err "shm-cache: error: $D/images.h5: dataset 'vec' rows are [16]; the slab holds [1,28,28]"
run "$S" fill img --from "$WORK/none.h5" --dataset images
expect_rc 66
run "$S"
expect_rc 64
expect_err "shm-cache: error: a subcommand is required (see --help)"

# cache-fill reads its input from a slab: the same embeddings as from the HDF5 file.
run "$S" create full --len 300 --dims 1,28,28 --slots 300 -q
expect_rc 0
"$S" fill full --from "$D/images.h5" --dataset images -q
run "$TC_BIN/cache-fill" --input shm:full --encoder cnn="$D/cnn.pt" --out "$WORK/from-shm.h5" -q
expect_rc 0
tool "$TC_BIN/cache-fill" --input "$D/images.h5" --features images --encoder cnn="$D/cnn.pt" --out "$WORK/from-h5.h5" -q
py "
import h5py, numpy as np
a = h5py.File('$WORK/from-shm.h5', 'r'); b = h5py.File('$WORK/from-h5.h5', 'r')
print(a.attrs['input_path'], bool(np.array_equal(a['embeddings/cnn'][:], b['embeddings/cnn'][:])))
"
expect_out "shm:full True"
run "$TC_BIN/cache-fill" --input shm:img --encoder cnn="$D/cnn.pt" --out "$WORK/partial.h5"
expect_rc 65
expect_err "cache-fill: error: img: index 200 is not cached (shm-cache fill it first)"
expect_no_file "$WORK/partial.h5"
run "$TC_BIN/cache-fill" --input shm:absent --encoder cnn="$D/cnn.pt" --out "$WORK/absent.h5"
expect_rc 69
expect_err "cache-fill: error: absent: no such slab in /dev/shm"

# gc-train --cache-shm: two trainings at once share one copy of the embeddings, and train exactly
# as from the cache file alone.
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$D/cnn.pt" --features images --labels labels --out "$WORK/c.h5"
for i in 1 2; do
  tool "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --head linear:8 -b 50 -c 10 --epochs 2 \
    --cache-shm shared --out "$WORK/shm$i.pt" -q &
done
wait
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings cnn --head linear:8 -b 50 -c 10 --epochs 2 --out "$WORK/file.pt" -q
expect_rc 0
py_later "True" "
import torch
m = [dict(torch.jit.load('$WORK/%s.pt' % n).named_parameters()) for n in ('shm1', 'shm2', 'file')]
print(all(torch.equal(m[0][k], m[i][k]) for k in m[0] for i in (1, 2)))
"
run "$S" stat shared-cnn --json
expect_out_has '"filled_fraction":1.0'
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$D/cnn_other.pt" --features images --labels labels --out "$WORK/c2.h5"
run "$TC_BIN/gc-train" --cache "$WORK/c2.h5" --embeddings cnn -b 50 --steps 1 --cache-shm shared
expect_rc 65
expect_err "gc-train: error: shared-cnn: slab holds other embeddings than $WORK/c2.h5 (remove it: shm-cache rm shared-cnn)"

# gc-train reads raw datasets from slabs too: the same training as from the HDF5 file.
run "$S" create q --len 240 --dims 6 --dtype float32 --slots 240 -q
run "$S" create p --len 240 --dims 6 --dtype float32 --slots 240 -q
"$S" fill q --from "$D/pairs.h5" --dataset q -q
"$S" fill p --from "$D/pairs.h5" --dataset p -q
run "$TC_BIN/gc-train" --query shm:q --passage shm:p --encoder "$D/tower.pt" -b 40 -c 7 --steps 3 --out "$WORK/ts.pt" -q
expect_rc 0
run "$TC_BIN/gc-train" --data "$D/pairs.h5" --query q --passage p --encoder "$D/tower.pt" -b 40 -c 7 --steps 3 --out "$WORK/th.pt" -q
expect_rc 0
py_later "True" "
import torch
a = dict(torch.jit.load('$WORK/ts.pt').named_parameters()); b = dict(torch.jit.load('$WORK/th.pt').named_parameters())
print(all(torch.equal(a[k], b[k]) for k in a))
"

run "$S" df --json
expect_rc 0
expect_out_has '"slabs":8'
run "$S" rm --all
expect_rc 0
run "$S" list --json
expect_out_has '"slabs":[]'
finish
