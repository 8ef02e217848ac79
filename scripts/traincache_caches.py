"""How an updated cache is compared with a full fill of the same input: the one comparison of
cache-fill --update's contract, for the tests (tests/cli/update_lib.sh) and make bench's `update`.

Needs h5py and numpy.
"""
import h5py
import numpy as np

# cache-fill's kUpdateNoiseFactor (libcore/include/traincache/fill/fill.h): an update's rows may be
# this many times an encoder's batch noise (what its rows' last bits move with their batch, as the
# update measured and recorded it) from a full fill's.
UPDATE_NOISE_FACTOR = 4


def update_differences(updated, full):
    """Each encoder's embeddings in `updated` (an update) against `full` (a full fill of the same
    input): {name: (largest difference, what the update allows it, the batch noise it recorded)}."""
    out = {}
    with h5py.File(updated, "r") as a, h5py.File(full, "r") as b:
        for name in b["embeddings"]:
            x = a["embeddings/" + name][()].astype(np.float64)
            y = b["embeddings/" + name][()].astype(np.float64)
            noise = float(a["embeddings/" + name].attrs["batch_max_abs_diff"])
            out[name] = (float(np.abs(x - y).max()), UPDATE_NOISE_FACTOR * noise, noise)
    return out
