"""Slabs shared between the C++ tools and Python: slabs filled by shm-cache read from Python byte for
byte (fixed, hashed and variable layouts); slabs filled from Python read by shm-cache and
cache-fill; two Python processes filling one slab at once, one killed with SIGKILL inside a write,
then `shm-cache repair` and a C++ reader sees every byte right; SIGINT inside put() leaves no slot
claimed; errors carry the tools' exit codes and messages."""
import json
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

from tc_check import DATA, PREFIX, SOURCE, cache_fill, eq, finish, ok, raises, tool, tool_json
from traincache import Slab, TraincacheError, remove_slab

ENV = dict(os.environ, PYTHONPATH=os.path.join(SOURCE, "python"))

with h5py.File(os.path.join(DATA, "images.h5"), "r") as f:
    images, vec = f["images"][:], f["vec"][:]
with h5py.File(os.path.join(DATA, "tokens.h5"), "r") as f:
    tokens = f["input_ids"][:]


def cxx_get(name, index):
    """What shm-cache get prints for one index: (exit code, raw bytes, stderr)."""
    p = tool("shm-cache", "get", name, index, check=False, binary=True)
    return p.returncode, p.stdout, p.stderr.decode().strip()


# --- filled by shm-cache, read from Python ------------------------------------------------------
tool("shm-cache", "create", "img", "--len", 300, "--dims", "1,28,28", "--dtype", "uint8", "--slots", 300)
tool("shm-cache", "fill", "img", "--from", f"{DATA}/images.h5", "--dataset", "images", "--workers", 2)
img = Slab.attach("img", writable=False)
eq((img.layout, img.shape, img.dtype.name, img.length, img.slots), ("fixed", (1, 28, 28), "uint8", 300, 300),
   "a C++ slab's description in Python")
ok(all(img.get(i).tobytes() == images[i].tobytes() for i in range(300)), "all 300 items equal the HDF5 rows")
ok(all(img.get(i).tobytes() == cxx_get("img", i)[1] for i in (0, 151, 299)), "and shm-cache get's bytes")
eq(img.info(), tool_json("shm-cache", "stat", "img", "--json")["slab"], "info() equals shm-cache stat --json")
eq(img.get(5, copy=False).flags.writeable, False, "views are read-only")
eq(img.get(5).flags.writeable, True, "copies (the default) are not")
ok(img.get(5, copy=False).tobytes() == images[5].tobytes(), "a view holds the item's bytes too")

# docs/shm-cache.md's recipe for readers without traincache, run as written on the same slab
doc = open(os.path.join(SOURCE, "docs", "shm-cache.md")).read()
recipe = doc.split("### Reading a slab without traincache", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
scope = {}
exec(recipe.replace("/dev/shm/traincache-NAME", img.path), scope)
eq((scope["layout"], scope["dtype"], scope["dims"], scope["length"], scope["slots"], scope["item_bytes"]),
   (0, 0, (1, 28, 28), 300, 300, 784), "the documented header offsets and dtype code")
ok(bool(scope["filled"].all()) and np.array_equal(scope["items"], images), "the documented recipe reads every item")

tool("shm-cache", "create", "vec", "--len", 300, "--dims", 16, "--dtype", "float32", "--slots", 100,
     "--select", "hashed", "--seed", 4)
tool("shm-cache", "fill", "vec", "--from", f"{DATA}/images.h5", "--dataset", "vec")
hv = Slab.attach("vec")
slots = [hv.slot(i) for i in range(300)]
eq(sum(s is not None for s in slots), 100, "hashed selection: 100 cacheable indices")
eq([slots[i] for i in (0, 1, 2, 50, 299)],
   [json.loads(tool("shm-cache", "get", "vec", i, "--json", check=False).stdout)["slot"] for i in (0, 1, 2, 50, 299)],
   "the slot of an index is the one shm-cache names")
ok(all((hv.get(i) is None) == (slots[i] is None) for i in range(300)), "non-cacheable indices are misses")
ok(all(hv.get(i).tobytes() == vec[i].tobytes() for i in range(300) if slots[i] is not None),
   "cacheable float32 items equal the HDF5 rows")
eq(hv.state(next(i for i in range(300) if slots[i] is None)), None, "state of a non-cacheable index")
eq(hv.put(next(i for i in range(300) if slots[i] is None), vec[0]), False, "put of a non-cacheable index: a no-op")

tool("shm-cache", "create", "tok", "--len", 200, "--variable", "--dtype", "int64", "--limit", "64KiB")
tool("shm-cache", "fill", "tok", "--from", f"{DATA}/tokens.h5", "--dataset", "input_ids")
tok = Slab.attach("tok")
eq((tok.layout, tok.shape, tok.dtype.name), ("variable", None, "int64"), "variable layout in Python")
ok(all(np.array_equal(tok.get(i), tokens[i]) for i in range(200)), "variable-layout items equal the token rows")

# --- filled from Python, read by shm-cache and cache-fill ----------------------------------------
py = Slab.create("py", 300, (16,), "float32", content_id="vec rows")
stored = [py.put(i, vec[i]) for i in range(300)]
eq(sum(stored), 300, "Python stores 300 items")
eq(py.put(3, vec[4]), False, "a filled slot is never overwritten")
ok(all(cxx_get("py", i)[1] == vec[i].tobytes() for i in (0, 3, 77, 299)), "shm-cache get reads Python's bytes")
desc = tool_json("shm-cache", "stat", "py", "--json")["slab"]
eq((desc["content_id"], desc["counts"]["filled"], desc["creator"].endswith("(python)")), ("vec rows", 300, True),
   "shm-cache stat: content id, 300 filled, created by python")
from_slab = cache_fill("from_slab.h5", "--input", "shm:py", "--encoder", f"mlp={DATA}/mlp.pt")
from_h5 = cache_fill("from_h5.h5", "--input", f"{DATA}/images.h5", "--features", "vec", "--encoder",
                     f"mlp={DATA}/mlp.pt")
with h5py.File(from_slab, "r") as a, h5py.File(from_h5, "r") as b:
    ok(np.array_equal(a["embeddings/mlp"][:], b["embeddings/mlp"][:]),
       "cache-fill --input shm:py encodes exactly the HDF5 rows")

var = Slab.create("pyvar", 10, dtype="int32", variable=True, limit=1024)
var.put(2, [5, -1, 7])
var.put(3, np.zeros(0, np.int32))
eq(cxx_get("pyvar", 2)[1], np.array([5, -1, 7], np.int32).tobytes(), "variable-layout item written by Python")
eq(cxx_get("pyvar", 3)[:2], (0, b""), "an empty item is a hit of 0 bytes")

# --- two Python writers at once; one killed inside a write ---------------------------------------
N, WIDTH = 600, 256
Slab.create("race", N, (WIDTH,), "float32").close()
WRITER = """
import os, sys, time
import numpy as np
from traincache import Slab
s = Slab.attach("race")
order, stop_after = sys.argv[1], int(sys.argv[2])
indices = range(600) if order == "up" else range(599, -1, -1)
stored = 0
for i in indices:
    item = np.full(256, i, np.float32) + np.arange(256, dtype=np.float32) / 1000
    if stored == stop_after:
        offset = s.begin_write(i, item.nbytes)
        if offset is None:
            continue
        np.frombuffer(s._rw, np.uint8, 512, offset)[:] = 0xFF   # half an item, never published
        print("claimed", i, stored, flush=True)
        time.sleep(120)
    stored += s.put(i, item)
print("stored", stored, flush=True)
"""
victim = subprocess.Popen([sys.executable, "-c", WRITER, "down", "150"], env=ENV, stdout=subprocess.PIPE, text=True)
line = victim.stdout.readline().split()  # the victim holds a claim now
survivor = subprocess.Popen([sys.executable, "-c", WRITER, "up", "-1"], env=ENV, stdout=subprocess.PIPE, text=True)
victim.send_signal(signal.SIGKILL)
victim.wait()
out, _ = survivor.communicate(timeout=120)
eq(line[0], "claimed", "the victim claimed a slot and stopped inside the write")
k, victim_stored, survivor_stored = int(line[1]), int(line[2]), int(out.split()[1])
eq(victim.returncode, -signal.SIGKILL, "the victim was killed")
eq(victim_stored + survivor_stored, N - 1, "every other item stored exactly once between the two writers")
race = Slab.attach("race")
eq(race.state(k), "writing", "the killed writer's slot is left WRITING")
eq(race.get(k), None, "and is a miss for Python readers")
rc, data, err = cxx_get("race", k)
eq((rc, data, err), (1, b"", f"shm-cache: error: race: index {k}: miss (writing)"), "and for shm-cache get")
p = tool("shm-cache", "repair", "race")
eq(p.stderr.strip(), "shm-cache: race: 1 slot left by dead writers returned to empty", "shm-cache repair")
eq(race.state(k), "empty", "the slot is empty again")
eq(race.put(k, np.full(WIDTH, k, np.float32) + np.arange(WIDTH, dtype=np.float32) / 1000), True,
   "and Python fills it")
want = {i: (np.full(WIDTH, i, np.float32) + np.arange(WIDTH, dtype=np.float32) / 1000).tobytes() for i in range(N)}
bad = [i for i in range(N) if cxx_get("race", i)[1] != want[i]]
eq(bad, [], "a C++ reader sees every item's exact bytes")
eq(tool_json("shm-cache", "stat", "race", "--json")["slab"]["counts"]["filled"], N, "every slot filled")

# --- SIGINT inside put(): the claim is given back ---------------------------------------------------
SLOTS = 256
Slab.create("sigint", SLOTS, (1 << 19,), "float64").close()  # 1 GiB at most: pages are touched when filled
INTERRUPTED = """
import numpy as np
from traincache import Slab
s = Slab.attach("sigint")
item = np.ones(1 << 19)
print("ready", flush=True)
try:
    for i in range(256):
        s.put(i, item)   # 4 MiB copies into fresh pages: most of the time is spent inside put
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted", i, flush=True)
"""
proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED], env=ENV, stdout=subprocess.PIPE, text=True)
proc.stdout.readline()
watch, deadline = Slab.attach("sigint", writable=False), time.monotonic() + 60
while watch.state(0) != "filled" and time.monotonic() < deadline:  # interrupt once it is filling
    time.sleep(0.005)
watch.close()
proc.send_signal(signal.SIGINT)
out, _ = proc.communicate(timeout=60)
ok(out.startswith("interrupted"), f"the writer was interrupted while filling ({out.strip()})")
counts = tool_json("shm-cache", "stat", "sigint", "--json")["slab"]["counts"]
eq(counts["writing"], 0, "no slot left WRITING after a KeyboardInterrupt inside put()")
ok(0 < counts["filled"] < SLOTS, f"the interrupt came while filling ({counts['filled']} of {SLOTS} stored)")
remove_slab("sigint")

# --- errors ------------------------------------------------------------------------------------------
raises(lambda: Slab.attach("nope"), TraincacheError, "nope: no such slab in /dev/shm", 69)
raises(lambda: Slab.create("py", 10, (2,)), TraincacheError, "py: a slab with this name exists", 73)
raises(lambda: Slab.attach("a/b"), TraincacheError, "'a/b': invalid slab name (use 1-200 of A-Z a-z 0-9 . _ -)", 64)
with open(f"/dev/shm/{PREFIX}junk", "wb") as f:
    f.write(b"not a slab" * 1000)
raises(lambda: Slab.attach("junk"), TraincacheError, "junk: not a traincache slab (bad magic)", 65)
raises(lambda: Slab.create("big", 10 ** 12, (1 << 20,), "float64"), TraincacheError, None, 73)
raises(lambda: img.put(0, images[0]), TraincacheError, "img: attached read-only", 64)
raises(lambda: py.put(0, np.zeros(15, np.float32)), ValueError, "py: item shape [15] is not the slab's [16]")
raises(lambda: py.put(0, np.zeros(16, np.complex64)), TypeError, "py: cannot store complex64 values in a float32 slab")
raises(lambda: Slab.create("i8", 4, (2,), "int8").put(0, [1, 300]), ValueError, "i8: values outside the range of int8")
raises(lambda: Slab.create("c", 4, (2,), "complex64"), TraincacheError, None, 64)
raises(lambda: Slab.create("c", 0, (2,)), ValueError, "c: the dataset length must be positive")
raises(lambda: Slab.create("c", 4), ValueError, "c: a fixed layout needs the item shape (or variable=True)")
raises(lambda: Slab.create("c", 4, variable=True), ValueError,
       "c: a variable layout takes no shape and needs limit (its arena's bytes)")
raises(lambda: Slab.create("c", 4, (2,), slots=2, limit=64), ValueError, "c: give slots or limit, not both")
raises(lambda: Slab.create("c", 4, (2,), limit="lots"), ValueError, "'lots': not a size (examples: 512MiB, 2GiB, 1000000)")
eq(Slab.create("c", 10, (4,), "float32", limit="64B").slots, 4, "limit in bytes: 64 B hold 4 items of 16 B")
# The library's refusals name create()'s arguments, not shm-cache's flags (--dims, --limit).
raises(lambda: Slab.create("c0", 4, (2, 0)), ValueError, "c0: item shape [2, 0]: every dimension must be positive")
# Arguments of the wrong type are refused naming the slab and the argument, not by int()'s or numpy's
# own words; int() made 4.5 a dimension of 4 and "ten" "invalid literal for int() with base 10"; a
# negative dimension was "limit: the slab size does not fit 64 bits" (issue 84, messages).
raises(lambda: Slab.create("c0", 4, (-4,)), ValueError, "c0: item shape [-4]: every dimension must be positive")
raises(lambda: Slab.create("c0", 4, (4.5,)), TypeError,
       "c0: each dimension of the item shape must be an integer, not float (4.5)")
raises(lambda: Slab.create("c0", "ten", (4,)), TypeError, "c0: the dataset length must be an integer, not str ('ten')")
raises(lambda: Slab.create("c0", 4, (4,), "nonsense"), TypeError, "c0: dtype 'nonsense' is not a numpy dtype")
raises(lambda: Slab.create("c0", 4, (4,), slots=2.5), TypeError, "c0: slots must be an integer, not float (2.5)")
raises(lambda: Slab.create("c1", 10, (4,), "float32", limit=8), TraincacheError, "limit: the budget holds no item of 16 B", 64)
raises(lambda: py.get(-1), IndexError, "py: index -1 is negative")
py.close()
raises(lambda: py.get(0), ValueError, "slab 'py' is closed")
raises(lambda: remove_slab("nope"), TraincacheError, "nope: no such slab in /dev/shm", 69)

# --- a slab truncated while in use: TraincacheError 74 from every call, never a SIGBUS ---------------
cut = Slab.create("cut", 64, (1024,), "float32")
eq(cut.put(3, np.full(1024, 3, np.float32)), True, "an item stored before the truncation")
os.truncate(cut.path, 0)
TRUNCATED = "cut: the slab's object was truncated while in use (a bus error reading it)"
raises(lambda: cut.get(3), TraincacheError, TRUNCATED, 74)
raises(lambda: cut.put(4, np.zeros(1024, np.float32)), TraincacheError, TRUNCATED, 74)
raises(lambda: cut.state(3), TraincacheError, TRUNCATED, 74)
raises(lambda: cut.slot(3), TraincacheError, TRUNCATED, 74)
raises(lambda: cut.repair(), TraincacheError, TRUNCATED, 74)
e = raises(lambda: cut.info(), TraincacheError, None, 74)
ok(str(e).startswith("cut: the slab was truncated to 0 bytes while in use (it had "), f"info() says so ({e})")
cut.remove()

finish()
