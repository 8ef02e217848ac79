"""SharedCache: a node-wide cache of a Dataset's items for every DataLoader worker and every rank on
the machine, in one shared-memory slab (one copy of each item per node, not per process).

    x = cache.get(i)
    if x is None:
        x = load(i)
        cache.put(i, x)
"""
import hashlib
import numbers
import os
import warnings
import weakref

import numpy as np
import torch

from . import _capi
from .slab import FILLED, Slab, TraincacheError, _integer, _item_shape

# torch.from_numpy warns that a read-only array gives a tensor over memory it cannot write: that is
# the point here (a write through a cached item would change it for every process), and the warning
# would be printed by every worker. Only calls from this module are silenced.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning,
                        module=__name__)


def _remove_if_owner(path: str, inode: int, pid: int) -> None:
    """Removes a temporary slab's object when this is the process that created it and the name
    still refers to the same object (not one made after it was removed)."""
    if os.getpid() != pid:
        return
    try:
        if os.stat(path).st_ino == inode:
            os.unlink(path)
    except OSError:
        pass


# A slab header holds a content id of at most 127 bytes; longer ones are recorded by their digest.
CONTENT_ID_BYTES = 127


def _content_id(content_id: str) -> str:
    """`content_id`, or "sha256:<hex>" of it when it is longer than a slab header holds."""
    raw = content_id.encode()
    return content_id if len(raw) <= CONTENT_ID_BYTES else "sha256:" + hashlib.sha256(raw).hexdigest()


class SharedCache:
    """Items of a dataset of `length` items, each of `shape` and `dtype`, cached by index in slab
    `name`. The first process on the machine creates the slab, every other one (DataLoader workers,
    other ranks, other jobs) attaches to it; slots left half-written by a process that died are
    repaired when attaching.

    `slots` (an item count) or `limit` (bytes, or "2GiB") caches only part of the dataset: the
    first indices, or with `selection="hashed"` a seeded subset spread over it. Without either,
    every item is cacheable. The slab is checked before use: /dev/shm must have room for it
    (TraincacheError 73 otherwise: no silent fallback), and an existing slab must hold the same
    length, shape, dtype, selection and `content_id` (65 otherwise), and belong to this user unless
    `trust_owner` (65 otherwise). The library makes and checks it as the tools share slabs. Give
    `content_id` something that changes when the items would (the data's path and the
    preprocessing), so that a kept slab is never reused for other data; one of over 127 bytes is
    recorded as "sha256:" and its digest. `get` and `put` take integer indices below `length`
    (IndexError past it, TypeError for anything but an integer).

    Unless `keep`, the slab is temporary: the process that created it removes it when it closes
    the cache or exits (processes still attached keep their mapping), and `shm-cache rm --stale`
    removes it if that process was killed. With `keep=True` it stays for the next run.

    Create the cache in the main process (the Dataset's __init__), before the DataLoader starts its
    workers: they inherit the attachment. A cache pickled for a spawned worker attaches again.
    """

    def __init__(self, name: str, length: int, shape, dtype="float32", *, slots=None, limit=None,
                 selection: str = "first", seed: int = 0, content_id: str = "", keep: bool = False,
                 mode: int = 0o600, trust_owner: bool = False):
        try:
            dtype = np.dtype(dtype).name
        except TypeError:
            raise TypeError(f"{name}: dtype {dtype!r} is not a numpy dtype") from None
        self._spec = dict(name=name, length=_integer(name, "the dataset length", length),
                          shape=tuple(_item_shape(name, shape)), dtype=dtype, slots=slots, limit=limit, selection=selection, seed=seed,
                          content_id=_content_id(content_id), keep=keep, mode=mode, trust_owner=trust_owner)
        if slots is None and limit is None:
            self._spec["slots"] = int(length)
        self.hits = self.misses = self.stored = 0
        self.slab, self.created = self._open(create=True)
        self._prepare_reads()
        self._finalizer = None
        if self.created and not keep:
            self._finalizer = weakref.finalize(self, _remove_if_owner, self.slab.path,
                                               os.stat(self.slab.path).st_ino, os.getpid())

    def _prepare_reads(self) -> None:
        self._torch_dtype = getattr(torch, self._spec["dtype"])
        # Every item as one tensor over the slab's read-only mapping (made once: torch.from_numpy
        # warns on each read-only array it wraps), indexed by the views get(copy=False) returns.
        self._views = torch.from_numpy(self.slab._items) if self.slab._items is not None else None

    def _open(self, create: bool):
        s = self._spec
        if not create:  # a spawned worker: the parent's slab, checked as it was when made
            slab = Slab.attach(s["name"], writable=True, trust_owner=s["trust_owner"])
            self._check(slab)
            return slab, False
        slab, created = Slab.open_shared(s["name"], s["length"], s["shape"], s["dtype"], slots=s["slots"],
                                         limit=s["limit"], selection=s["selection"], seed=s["seed"], mode=s["mode"],
                                         content_id=s["content_id"], temporary=not s["keep"],
                                         trust_owner=s["trust_owner"])
        if not created:
            slab.repair()
        return slab, created

    def _check(self, slab: Slab) -> None:
        s = self._spec
        want = (s["length"], s["shape"], s["dtype"], s["content_id"])
        have = (slab.length, slab.shape, slab.dtype.name, slab.content_id)
        if have != want:
            slab.close()
            raise TraincacheError(65, f"{s['name']}: the slab holds other items (length {have[0]}, shape "
                                      f"{list(have[1]) if have[1] else 'variable'}, {have[2]}, content id "
                                      f"'{have[3]}'; wanted length {want[0]}, shape {list(want[1])}, {want[2]}, "
                                      f"content id '{want[3]}'): remove it (shm-cache rm {s['name']}) or use "
                                      "another name")

    def get(self, index: int, copy: bool = True):
        """The cached item at `index` as a torch tensor, or None for a miss. By default the tensor is
        a private copy (a few microseconds; see docs/python.md): it may be changed in place, and a
        slab truncated while in use is a TraincacheError instead of a SIGBUS. With `copy=False` it
        shares the slab's memory, which is read-only: an in-place change of it (x.add_(1)) kills
        the process with SIGSEGV instead of changing the item for every process."""
        if copy:  # one library call, straight into the tensor returned
            slab = self.slab
            i = slab._index(index)
            # A miss keeps its tensor for the next call (dict.pop is atomic: threads never share one).
            out = self.__dict__.pop("_spare", None)
            if out is None:
                out = torch.empty(self._spec["shape"], dtype=self._torch_dtype)
            found = _capi.lib().tc_slab_read(slab._h(), i, out.data_ptr(), slab._item_bytes, None)
            if found < 0:
                _capi.check(found)
            if found:
                self.hits += 1
                return out
            self._spare = out
            self.misses += 1
            return None
        if self._views is not None:  # no library call: the state word read from the mapping
            i = self.slab._index(index)
            found = self.slab._filled_slot(i)
            if found is not None and found[1] == FILLED:
                self.hits += 1
                return self._views[found[0]]
            x = None if found is None else self.slab._checked_copy(i, *found)
        else:
            x = self.slab.get(index, copy=False)
        if x is None:
            self.misses += 1
            return None
        self.hits += 1
        return torch.from_numpy(x)

    def put(self, index: int, value) -> bool:
        """Caches `value` (a tensor or array of the cache's shape) at `index` unless it is there
        already, being written by another process, or not cacheable; True when this call stored it."""
        stored = self.slab.put(index, value)  # a ready tensor: one library call from where it is
        self.stored += stored
        return stored

    def counts(self) -> dict:
        """Slot counts of the whole slab (every process's items): empty, writing, filled, ..."""
        return self.slab.info(counts=True)["counts"]

    def close(self) -> None:
        """Detaches; the process that created a temporary slab also removes it."""
        self._views = None
        self.slab.close()
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self) -> int:
        return self._spec["length"]

    def __repr__(self) -> str:
        s = self._spec
        filled = self.counts().get("filled", 0)
        return (f"<traincache.SharedCache {s['name']!r}: {s['length']} items of {list(s['shape'])} {s['dtype']}, "
                f"{self.slab.slots} cacheable, {filled} filled on this machine; this process (not its "
                f"DataLoader workers, which count their own): {self.hits} hits, {self.misses} misses, "
                f"{self.stored} stored>")

    def __getstate__(self):
        return {"spec": self._spec}

    def __setstate__(self, state):
        # A spawned worker: attach to the slab its parent made (never create or own one).
        self._spec = state["spec"]
        self.hits = self.misses = self.stored = 0
        self.slab, self.created = self._open(create=False)
        self._prepare_reads()
        self._finalizer = None


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _as_tensor(part, where: str):
    """A part of an item as the tensor a slab stores (at least one dimension), and its kind: how to
    give it back, and what every other item's part must match. A tensor or array comes back as it
    is (a 0-d one, such as torch.tensor(label), stored as one element and given back 0-d); a numpy
    scalar (np.int8(5)) as a scalar of its own dtype; a Python int or float as an int64 or float64
    element given back as the same number (ValueError for an int past int64). Errors name the part
    as `where` does ("part 1 of item 0")."""
    if isinstance(part, torch.Tensor):
        return (part.reshape(1), ("0-d tensor", part.dtype)) if part.dim() == 0 else (part, ("tensor", part.dtype))
    if isinstance(part, np.ndarray):
        if part.ndim == 0:
            return torch.from_numpy(part.reshape(1)), ("0-d array", part.dtype)
        return torch.from_numpy(part), ("array", part.dtype)
    if isinstance(part, np.generic) and part.dtype.name in _SCALAR_DTYPES:
        return torch.from_numpy(np.array([part])), ("scalar", part.dtype)
    if isinstance(part, numbers.Integral) and not isinstance(part, (bool, np.generic)):
        if not _INT64[0] <= int(part) <= _INT64[1]:
            raise ValueError(f"traincache.cached: {where} is the int {int(part)}, outside int64's range, which "
                             "the cache stores ints in")
        return torch.tensor([int(part)], dtype=torch.int64), ("number", type(part))
    if isinstance(part, numbers.Real) and not isinstance(part, (bool, np.generic)):
        return torch.tensor([float(part)], dtype=torch.float64), ("number", type(part))
    what = f"numpy {part.dtype.name} scalar" if isinstance(part, np.generic) else type(part).__name__
    raise TypeError(f"traincache.cached: {where} is a {what}, which cannot be cached (tensors, arrays and "
                    "numbers can)")


# The numpy scalar types a part may be: those a slab stores that torch has too.
_SCALAR_DTYPES = ("uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
# The tensor dtypes a slab stores.
_SLAB_DTYPES = tuple(getattr(torch, n) for n in _SCALAR_DTYPES)


def _checked_part(part, where: str):
    """_as_tensor(part), with a part no slab can hold refused naming `where` ("part 1 of item 0"):
    a dtype slabs do not store (complex, bool, bfloat16), or no values at all."""
    t, kind = _as_tensor(part, where)
    if t.dtype not in _SLAB_DTYPES:
        raise TypeError(f"traincache.cached: {where} is {_kind_name(kind)}, which a slab cannot hold (its "
                        f"dtypes: {', '.join(_SCALAR_DTYPES)}); convert it in the Dataset")
    if t.numel() == 0:
        raise ValueError(f"traincache.cached: {where} is {_kind_name(kind)} of shape {list(t.shape)}: it holds "
                         "no values, which a slab cannot cache")
    return t, kind


def _where(k: int, index: int, single: bool) -> str:
    """How a message names part k of item `index`: "item 3" (one part) or "part 1 of item 3"."""
    return f"item {index}" if single else f"part {k} of item {index}"


def _kind_name(kind) -> str:
    """A part's kind as a message names it: "an int8 tensor", "a numpy float16 scalar", "a Python int"."""
    form, dtype = kind
    if form == "number":
        return f"a Python {dtype.__name__}"
    name = str(dtype).replace("torch.", "")
    return {"tensor": f"a {name} tensor", "0-d tensor": f"a 0-d {name} tensor", "array": f"a {name} array",
            "0-d array": f"a 0-d {name} array", "scalar": f"a numpy {name} scalar"}[form]


class CachedDataset(torch.utils.data.Dataset):
    """A map-style Dataset whose items come from `dataset` once and from shared memory after that,
    for every DataLoader worker and rank of the machine. Made by cached()."""

    def __init__(self, dataset, name: str, **options):
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError(f"traincache.cached: {name}: the dataset must be map-style (len(dataset) and "
                            f"dataset[i]), not a {type(dataset).__name__}")
        if len(dataset) == 0:
            raise ValueError(f"traincache.cached: {name}: the dataset is empty (its items' shapes and dtypes "
                             "come from dataset[0])")
        self.dataset = dataset
        first = dataset[0]
        self._single = not isinstance(first, (tuple, list))
        parts = [first] if self._single else list(first)
        self._kinds, self.caches = [], []
        for k, part in enumerate(parts):
            t, kind = _checked_part(part, _where(k, 0, self._single))
            self._kinds.append(kind)
            self.caches.append(SharedCache(name if self._single else f"{name}.{k}", len(dataset), tuple(t.shape),
                                           str(t.dtype).replace("torch.", ""), **options))
        self._tuple = tuple if isinstance(first, tuple) or self._single else list

    def __len__(self) -> int:
        return len(self.dataset)

    @staticmethod
    def _back(x, kind):
        form, dtype = kind
        if form == "tensor":
            return x
        if form == "0-d tensor":
            return x.reshape(())
        if form == "array":
            return x.numpy()
        if form == "0-d array":
            return x.numpy().reshape(())
        if form == "scalar":
            return x.numpy()[0]
        return dtype(x.item())

    def _stored(self, index, parts):
        """The tensors to cache of item `index`'s parts: ValueError when their number or any part's
        type or dtype is not item 0's (a slab holds item 0's dtype, and each part comes back as
        item 0's kind: an np.int64(300) after an np.int8 item 0 would come back as 44)."""
        if len(parts) != len(self.caches):  # zip would drop the extra parts, or leave some out
            raise ValueError(f"traincache.cached: item {index} has {len(parts)} parts, item 0 had "
                             f"{len(self.caches)}: every item must have the same parts")
        stored = []
        for k, (part, want, cache) in enumerate(zip(parts, self._kinds, self.caches)):
            where = _where(k, index, self._single)
            t, kind = _as_tensor(part, where)
            if kind != want:
                raise ValueError(f"traincache.cached: {where} is {_kind_name(kind)}, item 0's was "
                                 f"{_kind_name(want)}: every item must have item 0's types and dtypes (convert "
                                 "them in the Dataset)")
            if tuple(t.shape) != cache._spec["shape"]:
                raise ValueError(f"traincache.cached: {where} has shape {list(t.shape)}, item 0's had "
                                 f"{list(cache._spec['shape'])}: every item must have item 0's shapes (resize or pad them "
                                 "in the Dataset)")
            stored.append(t)
        return stored

    def __getitem__(self, index):
        got = [c.get(index) for c in self.caches]
        if any(x is None for x in got):
            item = self.dataset[index]
            stored = self._stored(index, [item] if self._single else list(item))
            for c, x, t in zip(self.caches, got, stored):
                if x is None:
                    c.put(index, t)
            return item
        out = [self._back(x, kind) for x, kind in zip(got, self._kinds)]
        return out[0] if self._single else self._tuple(out)

    def close(self) -> None:
        for c in self.caches:
            c.close()

    def __repr__(self) -> str:
        return f"<traincache.CachedDataset of {type(self.dataset).__name__}: {', '.join(map(repr, self.caches))}>"


def cached(dataset, name: str, **options) -> CachedDataset:
    """`dataset` (any map-style Dataset whose items are a tensor, an array, or a tuple or list of
    tensors, arrays and numbers of a fixed shape) with its items cached in shared memory, without
    changing its __getitem__: the first access of an index on the machine loads it, every later
    one (any worker, any rank) reads it back. Each part of an item gets a SharedCache of its own,
    named `name` (one part) or `name.0`, `name.1`, ...; `options` are SharedCache's (slots, limit,
    content_id, keep, ...). Shapes and dtypes come from dataset[0]."""
    return CachedDataset(dataset, name, **options)
