"""The hit path of Slab.get / SharedCache.get: a hit is the stored bytes; a slot empty, being written,
left by a dead writer, repaired, or (in a SmartCache window) holding another key's item is a miss;
readers racing writers, in threads and in other processes, never see torn or foreign bytes; views
stay read-only for everyone; a copy and a view agree, and the copy is the caller's own."""
import mmap
import os
import struct
import subprocess
import sys
import threading

import numpy as np
import torch

from tc_check import SOURCE, eq, finish, ok, raises
import traincache
from traincache import SharedCache, Slab, TraincacheError
from traincache.slab import DIRECT_READS

ENV = dict(os.environ, PYTHONPATH=os.path.join(SOURCE, "python"))
ITEM = (1024,)


def pattern(i):
    """Item i: every element holds i (a torn item mixes two values, a foreign one holds another)."""
    return np.full(ITEM, i, np.float32)


def state_word(slab, slot, word=None):
    """The slot's state word, read (or written, for the tests) through a mapping of our own."""
    with open(slab.path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        at = slab.info(counts=False)["offsets"]["states"] + 8 * slot
        if word is not None:
            struct.pack_into("<Q", m, at, word)
        return struct.unpack_from("<Q", m, at)[0]


if os.uname().machine == "x86_64":
    ok(DIRECT_READS, "views are found without the library here (x86-64)")

# --- hits are the stored bytes, in every selection and both copy modes --------------------------
for selection, slots in (("first", 64), ("hashed", 48)):
    s = Slab.create(f"hits-{selection}", 64, ITEM, "float32", slots=slots, selection=selection, temporary=True)
    stored = [i for i in range(64) if s.put(i, pattern(i))]
    eq(len(stored), slots, f"{selection}: every cacheable index stored")
    ok(all(np.array_equal(s.get(i, copy=False), pattern(i)) and np.array_equal(s.get(i), pattern(i))
           for i in stored), f"{selection}: views and copies hold the stored bytes")
    missing = sorted(set(range(64)) - set(stored))
    ok(all(s.get(i, copy=False) is None and s.get(i) is None for i in missing),
       f"{selection}: indices that are not cacheable are misses")
    # Beyond the length is an error, not a miss (issue 43, items 19 and 28: 2**64 + 3 was item 3).
    for index in (64, 10**12, 2**64 + 3):
        raises(lambda: s.get(index, copy=False), IndexError,
               f"hits-{selection}: index {index} is past the last one (63)")
        raises(lambda: s.put(index, pattern(0)), IndexError)
    raises(lambda: s.get(1.5), TypeError, f"hits-{selection}: an index must be an integer, not float")
    eq(np.array_equal(s.get(np.int64(stored[0])), pattern(stored[0])), True, f"{selection}: a numpy index works")
    s.remove()

# --- states: empty, writing, a dead writer's, repaired, another key ------------------------------
s = Slab.create("states", 8, ITEM, "float32", temporary=True)
eq((s.get(0, copy=False), s.get(0)), (None, None), "an empty slot is a miss")
offset = s.begin_write(1, 4096)
ok(offset is not None, "slot 1 claimed")
s._rw[offset:offset + 4096] = pattern(1).tobytes()  # all bytes there, not yet published
eq((s.get(1, copy=False), s.get(1)), (None, None), "a slot being written is a miss")
s.commit(1)
ok(np.array_equal(s.get(1, copy=False), pattern(1)), "published: a hit")
dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
state_word(s, 2, 1 | int(dead.stdout) << 8)  # WRITING, by a process that has exited
eq((s.get(2, copy=False), s.state(2)), (None, "writing"), "a dead writer's slot is a miss")
eq((s.repair(), s.get(2, copy=False), s.state(2)), (1, None, "empty"), "repaired: empty, still a miss")
ok(s.put(2, pattern(2)) and np.array_equal(s.get(2, copy=False), pattern(2)), "then stored again: a hit")
# A SmartCache window's slot carries its item's key + 1: a hit only for that index.
ok(s.put(3, pattern(3)), "slot 3 stored")
state_word(s, 3, 2 | (7 + 1) << 8)  # slot 3 now says it holds key 7
eq((s.get(3, copy=False), s.get(3, copy=False) is None), (None, True), "a window slot of another key: a miss")
state_word(s, 3, 2 | (3 + 1) << 8)
got = s.get(3, copy=False)
ok(got is not None and np.array_equal(got, pattern(3)) and got.flags.writeable,
   "a window slot of this key: a hit, as a private copy (the slot may be reused)")
state_word(s, 3, 0xAB)
eq((s.get(3, copy=False), s.get(3)), (None, None), "an invalid state word is a miss")
s.remove()

# --- readers racing writers: threads --------------------------------------------------------------
N = 2000
s = Slab.create("race-threads", N, ITEM, "float32", temporary=True)
bad, seen = [], set()


def reader():
    while len(seen) < N and not bad:
        for i in range(N):
            x = s.get(i, copy=False)
            if x is not None:
                if not (x == i).all():
                    bad.append(i)
                seen.add(i)


def writer(first):
    for i in range(first, N, 2):
        s.put(i, pattern(i))


threads = [threading.Thread(target=reader) for _ in range(2)] + [threading.Thread(target=writer, args=(k,))
                                                                    for k in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
eq((bad, len(seen)), ([], N), "threads: every hit while two writers fill it is the whole, right item")
s.remove()

# --- readers racing writers: processes -----------------------------------------------------------
WORKER = """
import sys, numpy as np
from traincache import Slab
s = Slab.attach(sys.argv[1], writable=sys.argv[2] == "write")
n = int(sys.argv[3])
if sys.argv[2] == "write":
    for i in np.random.default_rng(int(sys.argv[4])).permutation(n):
        s.put(int(i), np.full(1024, i, np.float32))
else:
    seen, bad = set(), 0
    while len(seen) < n:
        for i in range(n):
            x = s.get(i, copy=sys.argv[4] == "copy")
            if x is not None:
                bad += int(not (x == i).all())
                seen.add(i)
    print(bad, len(seen))
"""
s = Slab.create("race-procs", N, ITEM, "float32")
procs = [subprocess.Popen([sys.executable, "-c", WORKER, "race-procs", "read", str(N), mode], env=ENV,
                          stdout=subprocess.PIPE, text=True) for mode in ("view", "copy")]
procs += [subprocess.Popen([sys.executable, "-c", WORKER, "race-procs", "write", str(N), str(seed)], env=ENV)
          for seed in (1, 2)]
outs = [p.communicate(timeout=120)[0] for p in procs]
eq([p.returncode for p in procs], [0, 0, 0, 0], "processes: readers and writers exit 0")
eq([o.strip() for o in outs[:2]], [f"0 {N}", f"0 {N}"], "processes: no torn or foreign item in views or copies")
s.remove()

# --- SharedCache: views are read-only for everyone, copies are the caller's -----------------------
cache = SharedCache("ro", 16, (4,), "float32")
cache.put(5, torch.arange(4, dtype=torch.float32))
a, b = cache.get(5), cache.get(5)
a.add_(1)
eq((b.tolist(), cache.get(5, copy=False).tolist()), ([0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]),
   "an in-place change of a copy changes nobody else's item")
CHILD = """
import sys, torch
from traincache import SharedCache
c = SharedCache("ro", 16, (4,), "float32")
v = c.get(5, copy=False)
print(v.tolist(), flush=True)
v.add_(1)
"""
p = subprocess.run([sys.executable, "-c", CHILD], env=ENV, capture_output=True, text=True)
eq((p.returncode, p.stdout.strip()), (-11, "[0.0, 1.0, 2.0, 3.0]"),
   "an in-place write through another process's view kills that process (SIGSEGV)")
eq(cache.get(5, copy=False).tolist(), [0.0, 1.0, 2.0, 3.0], "and the item is unchanged for everyone")
eq((cache.hits, cache.misses), (4, 0), "hits counted")
eq((cache.get(6), cache.get(6, copy=False), cache.misses), (None, None, 2), "misses counted")
# Issue 43, item 19 and 28: what a new user gets wrong is named, not a crash or a silent None.
raises(lambda: cache.get(16), IndexError, "ro: index 16 is past the last one (15)")
raises(lambda: cache.get(16, copy=False), IndexError, "ro: index 16 is past the last one (15)")
raises(lambda: cache.put(16, torch.zeros(4)), IndexError, "ro: index 16 is past the last one (15)")
raises(lambda: cache.put(7, (torch.zeros(4), torch.zeros(1))), TypeError,
       "ro: put takes one item (a tensor or array), not a tuple of 2; cache each part in a cache of its own "
       "(traincache.cached does)")
raises(lambda: cache.put(7, torch.zeros(4, device="meta")), TypeError,
       "ro: cannot store a tensor on the meta device (CPU or CUDA only)")
eq(repr(cache), "<traincache.SharedCache 'ro': 16 items of [4] float32, 16 cacheable, 1 filled on this machine; "
   "this process (not its DataLoader workers, which count their own): 4 hits, 2 misses, 1 stored>", "a readable repr")
long_id = "/data/" + "x" * 200
big = SharedCache("long-id", 4, (2,), "float32", content_id=long_id)
eq(big.slab.content_id.startswith("sha256:") and len(big.slab.content_id) == 71, True,
   "a content id over 127 bytes is recorded by its digest")
again = SharedCache("long-id", 4, (2,), "float32", content_id=long_id)
eq(again.created, False, "and a second cache with the same long id shares the slab")
again.close()
big.close()
# Slab.attach refuses another user's slab unless trusted, as every other entry point does.
other = Slab.create("other-user", 4, (2,), "float32")
os.chown(other.path, 1, 1)
raises(lambda: Slab.attach("other-user"), TraincacheError,
       "other-user: slab is owned by another user (uid 1); use trust_owner=True to share it, or another name", code=65)
trusted = Slab.attach("other-user", trust_owner=True)
eq(trusted.put(0, np.ones(2, np.float32)), True, "trust_owner=True: attached and written")
trusted.close()
other.remove()

# traincache.cached: any map-style Dataset's items, a tensor and a number each, cached without
# changing its __getitem__; the same items and types the Dataset gives, the second time from memory.
class Pairs(torch.utils.data.Dataset):
    def __init__(self):
        self.calls = 0

    def __len__(self):
        return 10

    def __getitem__(self, i):
        self.calls += 1
        return torch.full((3,), float(i)), i * 2


base = Pairs()
wrapped = traincache.cached(base, "pairs")
first = [wrapped[i] for i in range(10)]
second = [wrapped[i] for i in range(10)]
eq([(x.tolist(), y) for x, y in second], [(x.tolist(), y) for x, y in first], "cached items equal the Dataset's")
eq((type(second[3][1]), base.calls), (int, 11), "numbers come back as numbers; the Dataset read once per index")
wrapped.close()

# The usual Dataset item (image, torch.tensor(label)), Python floats and large ints: what comes back
# is what the Dataset gave, exactly (floats were rounded to float32, 0-d tensors refused with a CLI
# option's name); an item with another number of parts is refused, not cut.
class Usual(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == 3:
            return torch.zeros(2), torch.tensor(1), 0.5, 7, "extra"
        return torch.full((2,), float(i)), torch.tensor(i), 0.1 * i, 2 ** 40 + i


usual = traincache.cached(Usual(), "usual")
items = [[usual[i] for i in range(3)] for _ in range(2)]
x, label, f, n = items[1][1]
eq((label.shape, label.dtype, int(label)), (torch.Size([]), torch.int64, 1), "a 0-d tensor comes back 0-d")
eq((type(f), f, type(n), n), (float, 0.1, int, 2 ** 40 + 1), "floats and ints come back exactly")
try:
    usual[3]
    ok(False, "an item with more parts than item 0 is refused")
except ValueError as e:
    eq(str(e), "traincache.cached: item 3 has 5 parts, item 0 had 4: every item must have the same parts",
       "an item with more parts than item 0 is refused")
eq(repr(usual.caches[0]).split(";")[0].endswith("3 filled on this machine"), True,
   "repr counts the machine's filled items, not only this process's")
usual.close()

# SharedCache.put converts within a kind and never silently: int64 into float32 is refused (2**40 + 1
# was rounded), 1e300 is out of float32's range (it became inf); float64 rounding to float32 is kept.
raises(lambda: traincache.SharedCache("scalar", 2, (), "float32"), ValueError,
       "scalar: an item shape needs 1 to 8 dimensions, not []")
exact = traincache.SharedCache("kinds", 2, (1,), "float32")
for value, kind in ((np.array([2 ** 40 + 1], np.int64), TypeError), (np.array([1e300]), ValueError)):
    try:
        exact.put(0, value)
        ok(False, f"put({value.dtype}) refused")
    except kind:
        ok(True, f"put({value.dtype} {value[0]}) refused with {kind.__name__}")
eq((exact.put(1, np.array([0.1])), float(exact.get(1)[0])), (True, float(np.float32(0.1))), "float64 rounds to float32")
exact.close()

# Every part comes back as item 0's kind and dtype, so a part of another kind or dtype is refused
# when it is loaded (issue 84, item 1: np.int64(300) after an np.int8 item 0 came back as 44 on every
# later epoch, 1e6 after np.float16 as inf, -1 after np.uint8 as 255, a float64 tensor as float32),
# and nothing of it is stored. Numpy scalars come back as scalars of their own dtype, exactly.
class Parts(torch.utils.data.Dataset):
    def __init__(self, *items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


refused = [
    ((np.int8(5), np.int64(300)), "a numpy int64 scalar, item 0's was a numpy int8 scalar"),
    ((np.float16(1), 1e6), "a Python float, item 0's was a numpy float16 scalar"),
    ((np.uint8(1), -1), "a Python int, item 0's was a numpy uint8 scalar"),
    ((torch.zeros(2), torch.zeros(2, dtype=torch.float64)), "a float64 tensor, item 0's was a float32 tensor"),
    ((torch.tensor(1.5), 3), "a Python int, item 0's was a 0-d float32 tensor"),
    ((np.zeros(2, np.float32), np.zeros(2)), "a float64 array, item 0's was a float32 array"),
    ((2, 2.5), "a Python float, item 0's was a Python int"),
]
for n, ((first, later), what) in enumerate(refused):
    mixed = traincache.cached(Parts((torch.ones(1), first), (torch.ones(1), later)), f"mixed{n}")
    raises(lambda: mixed[1], ValueError, f"traincache.cached: part 1 of item 1 is {what}: every item must have "
           "item 0's types and dtypes (convert them in the Dataset)")
    eq([c.counts().get("filled", 0) for c in mixed.caches], [0, 0], f"nothing of the refused item is stored ({what})")
    mixed.close()
alone = traincache.cached(Parts(np.int8(5), np.int16(5)), "alone")
raises(lambda: alone[1], ValueError, "traincache.cached: item 1 is a numpy int16 scalar, item 0's was a numpy int8 "
       "scalar: every item must have item 0's types and dtypes (convert them in the Dataset)")
alone.close()
scalars = traincache.cached(Parts(np.int8(5), np.int8(-7)), "scalars")
items = [[scalars[i] for i in range(2)] for _ in range(2)]  # the second time from the slab
eq([(type(x), x) for x in items[1]], [(np.int8, np.int8(5)), (np.int8, np.int8(-7))],
   "numpy scalars come back as scalars of their dtype, exactly")
scalars.close()
halves = traincache.cached(Parts(np.float16(0.1), np.float16(65504)), "halves")
got = [[halves[i] for i in range(2)] for _ in range(2)][1]
eq([(type(x), x.tobytes()) for x in got], [(np.float16, np.float16(0.1).tobytes()), (np.float16, np.float16(65504).tobytes())],
   "float16 scalars come back to the bit")
halves.close()
raises(lambda: traincache.cached(Parts(2 ** 70), "huge"), ValueError,
       f"traincache.cached: item 0 is the int {2 ** 70}, outside int64's range, which the cache stores ints in")
big = traincache.cached(Parts(1, -(2 ** 63) - 1), "big")
raises(lambda: big[1], ValueError,
       f"traincache.cached: item 1 is the int {-(2 ** 63) - 1}, outside int64's range, which the cache stores ints "
       "in")
big.close()
# What no slab can hold, or no Dataset cached() can read, is refused naming the item and part (it
# was torch's or numpy's own words: "'list_iterator' object is not subscriptable", "complex64:
# unknown dtype", "shape: item dimensions must be positive", the internal slab's name for a shape).
raises(lambda: traincache.cached(iter([1]), "it"), TypeError,
       "traincache.cached: it: the dataset must be map-style (len(dataset) and dataset[i]), not a list_iterator")
raises(lambda: traincache.cached(Parts(), "none"), ValueError,
       "traincache.cached: none: the dataset is empty (its items' shapes and dtypes come from dataset[0])")
raises(lambda: traincache.cached(Parts((torch.ones(1), torch.zeros(2, dtype=torch.complex64))), "cx"), TypeError,
       "traincache.cached: part 1 of item 0 is a complex64 tensor, which a slab cannot hold (its dtypes: uint8, "
       "int8, int16, int32, int64, float16, float32, float64); convert it in the Dataset")
raises(lambda: traincache.cached(Parts(np.zeros((2, 0))), "empty"), ValueError,
       "traincache.cached: item 0 is a float64 array of shape [2, 0]: it holds no values, which a slab cannot cache")
raises(lambda: traincache.cached(Parts(({"a": 1},)), "d"), TypeError,
       "traincache.cached: part 0 of item 0 is a dict, which cannot be cached (tensors, arrays and numbers can)")
shapes = traincache.cached(Parts((torch.zeros(3), 1), (torch.zeros(4), 2)), "shapes")
raises(lambda: shapes[1], ValueError, "traincache.cached: part 0 of item 1 has shape [4], item 0's had [3]: every item "
       "must have item 0's shapes (resize or pad them in the Dataset)")
eq([c.counts().get("filled", 0) for c in shapes.caches], [0, 0], "nothing of an item of another shape is stored")
shapes.close()
raises(lambda: traincache.SharedCache("c0", 4, ("4",)), TypeError,
       "c0: each dimension of the item shape must be an integer, not str ('4')")
# numpy calls int64 -> float64 a safe cast, but it rounds 2**53 + 1 (issue 84, item 9).
wide = traincache.SharedCache("wide", 2, (1,), "float64")
raises(lambda: wide.put(0, np.array([2 ** 53 + 1], np.int64)), TypeError, "wide: int64 values that float64 cannot "
       "hold exactly (integers are stored in a float slab only when no value is rounded)")
eq((wide.put(1, np.array([2 ** 53], np.int64)), float(wide.get(1)[0])), (True, float(2 ** 53)),
   "an integer float64 holds exactly is stored")
wide.close()

view = cache.get(5, copy=False)
cache.close()
eq(view.tolist(), [0.0, 1.0, 2.0, 3.0], "a view stays readable after close()")
for copy in (True, False):
    try:
        cache.get(5, copy=copy)
        ok(False, f"get(copy={copy}) after close() raises")
    except ValueError as e:
        eq(str(e), "slab 'ro' is closed", f"get(copy={copy}) after close(): ValueError")

finish()
