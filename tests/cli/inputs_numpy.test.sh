#!/usr/bin/env bash
# NumPy inputs: .npy files (memory-mapped, either byte order) and .npz archives (stored or
# compressed members) give exactly the caches and training runs their HDF5 equivalents give;
# what cannot be read is refused with the file and the reason.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA

py "
import h5py, numpy as np
src = h5py.File('$D/images.h5', 'r')
images, labels = src['images'][:], src['labels'][:]
np.save('$WORK/images.npy', images)
np.save('$WORK/labels.npy', labels.astype(np.int64))
np.save('$WORK/labels_be.npy', labels.astype('>i8'))
np.savez('$WORK/stored.npz', images=images, labels=labels)
np.savez_compressed('$WORK/deflated.npz', images=images, labels=labels)
np.save('$WORK/fortran.npy', np.asfortranarray(images.reshape(len(images), -1)))
np.save('$WORK/objects.npy', np.array([{'a': 1}, None], dtype=object), allow_pickle=True)
raw = open('$WORK/images.npy', 'rb').read()
open('$WORK/short.npy', 'wb').write(raw[:len(raw) - 100])
p = h5py.File('$D/pairs.h5', 'r')
np.savez('$WORK/pairs.npz', q64=p['q64'][:], p64=p['p64'][:])
np.save('$WORK/q.npy', np.zeros((400, 3), np.float32))
"
expect_rc 0

# The HDF5 cache every NumPy variant must reproduce.
FILL=(--encoder cnn="$D/cnn.pt" --threads 2 -q)
run "$TC_BIN/cache-fill" --input "$D/images.h5" --features images --labels labels --out "$WORK/h5.h5" "${FILL[@]}"
expect_rc 0
same_cache() {  # $1: a cache that must hold the embeddings and labels of h5.h5
  py "
import h5py, numpy as np
a, b = h5py.File('$WORK/h5.h5', 'r'), h5py.File('$1', 'r')
print(bool((a['embeddings/cnn'][:] == b['embeddings/cnn'][:]).all()), bool((a['labels'][:] == b['labels'][:]).all()),
      b['labels'].attrs['source'])
"
}

# --convert device: the uint8 rows are scaled on the encoder's device (the CPU here) to the same floats.
run "$TC_BIN/cache-fill" --input "$D/images.h5" --features images --labels labels --out "$WORK/dev.h5" "${FILL[@]}" \
  --convert device
expect_rc 0
same_cache "$WORK/dev.h5"
expect_out "True True labels"

# A .npy input: its one array is the feature (named by the file's stem); --labels names a file.
run "$TC_BIN/cache-fill" --input "$WORK/images.npy" --labels "$WORK/labels.npy" --out "$WORK/npy.h5" "${FILL[@]}"
expect_rc 0
same_cache "$WORK/npy.h5"
expect_out "True True labels"
run "$TC_BIN/cache-inspect" "$WORK/npy.h5" --json
expect_out_has '"features":["images"]'
# Big-endian labels read the same values.
run "$TC_BIN/cache-fill" --input "$WORK/images.npy" --labels "$WORK/labels_be.npy" --out "$WORK/be.h5" "${FILL[@]}"
expect_rc 0
same_cache "$WORK/be.h5"
expect_out "True True labels_be"
# cache-inspect --verify re-reads the .npy input.
run "$TC_BIN/cache-inspect" --verify 6 "$WORK/npy.h5"
expect_rc 0
expect_out_re "	cnn	ok: 6 rows match"

# .npz members by name, stored and compressed.
for z in stored deflated; do
  run "$TC_BIN/cache-fill" --input "$WORK/$z.npz" --features images --labels labels --out "$WORK/$z.h5" "${FILL[@]}"
  expect_rc 0
  same_cache "$WORK/$z.h5"
  expect_out "True True labels"
done

# The fingerprint follows the .npy's values: one changed pixel is "changed: input/content_xxh3".
py "
import numpy as np
a = np.load('$WORK/images.npy'); a[7, 0, 3, 3] ^= 1; np.save('$WORK/images.npy', a)
"
run "$TC_BIN/cache-fill" --input "$WORK/images.npy" --labels "$WORK/labels.npy" --out "$WORK/npy.h5" "${FILL[@]}"
expect_rc 73
expect_err "cache-fill: error: $WORK/npy.h5: exists with another fingerprint (changed: input/content_xxh3): only the input's data, labels, keys or batch size changed; use --update to encode only the new and changed rows, or --force to encode every row"

# gc-train raw mode on .npz members trains exactly as on the HDF5 datasets.
GC=(--query q64 --passage p64 --encoder "$D/tower.pt" --batch-size 40 --chunk-size 7 --dtype float64 --optimizer sgd
    --lr 0.5 --similarity dot --no-shuffle --threads 1 --steps 3 -q)
run "$TC_BIN/gc-train" --data "$D/pairs.h5" "${GC[@]}" --metrics "$WORK/h5.jsonl"
expect_rc 0
run "$TC_BIN/gc-train" --data "$WORK/pairs.npz" "${GC[@]}" --metrics "$WORK/npz.jsonl"
expect_rc 0
py "
import json
a = [json.loads(l)['loss'] for l in open('$WORK/h5.jsonl')]
b = [json.loads(l)['loss'] for l in open('$WORK/npz.jsonl')]
print(len(a), a == b)
"
expect_out "3 True"

# What cannot be read: one line naming the file and the reason, exit 65 (66 when missing).
bad() {  # $1: exit status, $2: message, then cache-fill's input arguments
  local code=$1 msg=$2
  shift 2
  run "$TC_BIN/cache-fill" "$@" --encoder "$D/cnn.pt" --out "$WORK/bad.h5"
  expect_rc "$code"
  expect_err "cache-fill: error: $msg"
  expect_no_file "$WORK/bad.h5"
}
bad 65 "$WORK/fortran.npy: a Fortran-order array is not supported; save it in C order (numpy.ascontiguousarray)" \
  --input "$WORK/fortran.npy"
bad 65 "$WORK/objects.npy: an object array (Python objects, needs pickle) is not supported; save numbers" \
  --input "$WORK/objects.npy"
bad 65 "$WORK/short.npy: truncated: the header promises 235200 bytes of data, the file holds 235100" \
  --input "$WORK/short.npy"
bad 65 "$WORK/stored.npz: no member 'pixels' (members: images, labels)" --input "$WORK/stored.npz" --features pixels
bad 64 "--features: no input dataset for encoder 'cnn'" --input "$WORK/stored.npz"
bad 64 "$WORK/images.npy: a .npy file holds one array; 'labels' names no other" \
  --input "$WORK/images.npy" --labels labels
bad 66 "$WORK/missing.npy: no such file or directory" --input "$WORK/missing.npy"
bad 65 "$WORK/images.npy: rows mismatch: 'images' has 300 rows but 'q' has 400" \
  --input "$WORK/images.npy" --labels "$WORK/q.npy"
finish
