"""Shared-memory slabs from Python: the objects shm-cache, gc-train and cache-fill use, with the
same crash-safe slot protocol (docs/shm-cache.md), through libtraincache_c.so.

`get` returns a private copy of the item by default: the copy is made inside the library, which
turns a slab truncated under the reader into TraincacheError(74) instead of a SIGBUS that would
kill the interpreter, and the copy may be changed in place. `get(i, copy=False)` returns a
zero-copy, read-only view of the item in shared memory (a second, read-only mapping of the
object), found on x86-64 without a library call (the state word read from that mapping): no copy,
but an in-place write through it faults, and a slab truncated while the view is read kills the
process with SIGBUS. `put` claims the slot with a compare-and-swap, copies the
item and publishes it in one library call; a failure in between gives the slot back, and a
process killed there leaves it WRITING until `repair` (or `shm-cache repair`) returns it to empty.
"""
import contextlib
import ctypes
import json
import mmap
import operator
import os
import platform
import re
import sys

import numpy as np

from . import _capi
from ._capi import TraincacheError

# The dtype names of docs/shm-cache.md (numpy spells them the same way).
DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float16", "float32",
          "float64")
STATES = {0: "empty", 1: "writing", 2: "filled", 255: "invalid"}
FILLED = 2

# The slot protocol asks a reader to load the state word with acquire ordering. On x86-64 a plain
# aligned 64-bit load is one (loads are not reordered with later loads), so there the hit path
# reads the word from the mapping itself; on other processors every read goes through the library.
DIRECT_READS = platform.machine().lower() in ("x86_64", "amd64")


def _to_numpy(value, name):
    """A numpy array of `value` (a torch tensor is detached and moved to the CPU first). One item:
    a tuple or list of tensors is refused with a TypeError that says so (numpy's own message is
    "only one element tensors can be converted"), as is a tensor on a device without memory the
    CPU can reach (meta)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        if value.device.type not in ("cpu", "cuda"):
            raise TypeError(f"{name}: cannot store a tensor on the {value.device.type} device (CPU or CUDA only)")
        return value.detach().cpu().numpy()
    if isinstance(value, (tuple, list)) and any(hasattr(v, "detach") or isinstance(v, np.ndarray) for v in value):
        raise TypeError(f"{name}: put takes one item (a tensor or array), not a {type(value).__name__} of "
                        f"{len(value)}; cache each part in a cache of its own (traincache.cached does)")
    return np.asarray(value)


def _exact(ints, floats) -> bool:
    """Whether `floats` holds every value of integer array `ints` exactly (compared as Python numbers
    where a float past the integer type's range would wrap when cast back)."""
    limit = float(np.iinfo(ints.dtype).max)
    if np.any(np.abs(floats) >= limit):
        return all(int(f) == int(i) for f, i in zip(floats.ravel().tolist(), ints.ravel().tolist()))
    return bool(np.array_equal(floats.astype(ints.dtype), ints))


def parse_size(size) -> int:
    """Bytes of `size`: an int, or "2GiB", "512MiB", "1.5G", "1000000" as the tools read sizes."""
    if isinstance(size, int):
        return size
    text = str(size).strip()
    units = {"": 1, "B": 1, "K": 1 << 10, "k": 1 << 10, "KiB": 1 << 10, "M": 1 << 20, "MiB": 1 << 20,
             "G": 1 << 30, "GiB": 1 << 30, "T": 1 << 40, "TiB": 1 << 40, "KB": 10**3, "MB": 10**6,
             "GB": 10**9, "TB": 10**12}
    number = text.rstrip("BKMGTikb")
    try:
        value, mult = float(number), units[text[len(number):]]
    except (ValueError, KeyError):
        raise ValueError(f"'{size}': not a size (examples: 512MiB, 2GiB, 1000000)") from None
    if value < 0:
        raise ValueError(f"'{size}': not a size (examples: 512MiB, 2GiB, 1000000)")
    return int(round(value * mult))


# The library names the shm-cache flag an option came from; a Python caller gave these arguments.
_ARGUMENTS = {"--dims": "shape", "--limit": "limit", "--slots": "slots", "--len": "length", "--dtype": "dtype"}


@contextlib.contextmanager
def _as_arguments():
    """Re-raises the library's TraincacheError with create()'s argument names for shm-cache's flags."""
    try:
        yield
    except TraincacheError as e:
        message = str(e)
        for flag, argument in _ARGUMENTS.items():
            message = re.sub(re.escape(flag) + r"\b", argument, message)
        if message == str(e):
            raise
        raise TraincacheError(e.code, message) from None


def _integer(name, what, value) -> int:
    """`value` as an int: a Python or numpy integer (not a bool, a float or a string, which int()
    would turn into one without a word), else a TypeError naming the slab and the argument."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    raise TypeError(f"{name}: {what} must be an integer, not {type(value).__name__} ({value!r})")


def _item_shape(name, shape) -> list:
    """The item shape as a list of positive ints (one int is a shape of one dimension)."""
    dims = list(shape) if isinstance(shape, (tuple, list)) else [shape]
    if not 1 <= len(dims) <= 8:
        raise ValueError(f"{name}: an item shape needs 1 to 8 dimensions, not {dims}")
    out = [_integer(name, "each dimension of the item shape", d) for d in dims]
    if min(out) <= 0:
        raise ValueError(f"{name}: item shape {out}: every dimension must be positive")
    return out


def _create_options(name, length, shape, dtype, slots, limit, variable, selection, seed, mode, content_id,
                    temporary) -> dict:
    """The JSON options of tc_slab_create / tc_slab_open_shared, the arguments checked."""
    try:
        dtype = np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"{name}: dtype {dtype!r} is not a numpy dtype") from None
    if _integer(name, "the dataset length", length) <= 0:
        raise ValueError(f"{name}: the dataset length must be positive")
    if slots is not None and limit is not None:
        raise ValueError(f"{name}: give slots or limit, not both")
    if variable and (shape is not None or limit is None):
        raise ValueError(f"{name}: a variable layout takes no shape and needs limit (its arena's bytes)")
    if not variable and shape is None:
        raise ValueError(f"{name}: a fixed layout needs the item shape (or variable=True)")
    if slots is None and limit is None:
        slots = length  # every item cacheable
    opts = {"name": name, "length": int(length), "layout": "variable" if variable else "fixed",
            "dtype": dtype, "selection": selection, "seed": _integer(name, "seed", seed),
            "mode": _integer(name, "mode", mode), "content_id": content_id, "temporary": bool(temporary),
            "tool": "python"}
    if shape is not None:
        opts["dims"] = _item_shape(name, shape)
    if slots is not None:
        opts["slots"] = _integer(name, "slots", slots)
    if limit is not None:
        opts["limit_bytes"] = parse_size(limit)
    return opts


class Slab:
    """One attachment to a named slab (/dev/shm/<prefix><name>). Use Slab.attach() or Slab.create()."""

    def __init__(self, handle, writable: bool):
        lib = _capi.lib()
        self._handle = ctypes.c_void_p(handle)
        self.writable = writable
        try:
            desc = _capi.take_json(lib.tc_slab_describe, self._handle, 0)
            fd = lib.tc_slab_fd(self._handle)
            size = desc["total_bytes"]
            # Views come from a read-only mapping; writes go through a second, writable one.
            self._ro = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
            self._rw = (mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
                        if writable else None)
        except BaseException:
            lib.tc_slab_close(self._handle)
            self._handle = None
            raise
        self.name = desc["name"]
        self.path = desc["path"]
        self.layout = desc["layout"]
        self.dtype = np.dtype(desc["dtype"])
        self.shape = tuple(desc["dims"]) if self.layout == "fixed" else None
        self.length = desc["length"]
        self.slots = desc["slots"]
        self.content_id = desc["content_id"]
        self.temporary = desc["temporary"]
        self.creator_pid = desc["creator_pid"]
        self._nbytes = ctypes.c_uint64()
        self._torch_item = None  # torch's (dtype, shape) of an item, made by _item_pointer
        self._item_bytes = int(np.prod(self.shape)) * self.dtype.itemsize if self.shape is not None else 0
        # A fixed layout's state words, items and (hashed selection) index-to-slot map as arrays over
        # the read-only mapping, at the offsets the library validated when attaching.
        self._states = self._items = self._slot_map = None
        if self.layout == "fixed" and DIRECT_READS:
            offsets = desc["offsets"]
            self._states = np.frombuffer(self._ro, np.uint64, self.slots, offsets["states"])
            per_item = int(np.prod(self.shape))
            self._items = np.frombuffer(self._ro, self.dtype, self.slots * per_item,
                                        offsets["data"]).reshape((self.slots,) + self.shape)
            if desc["selection"] == "hashed":
                self._slot_map = np.frombuffer(self._ro, np.int64, self.length, offsets["map"])

    # --- opening and closing ---------------------------------------------------------------

    @classmethod
    def attach(cls, name: str, writable: bool = True, *, trust_owner: bool = False) -> "Slab":
        """Attaches to slab `name`, validating its header first. TraincacheError 69 when there is
        no such slab, 65 when the object is corrupt or not a slab, or belongs to another user and
        `trust_owner` is not given (as every other way in refuses one), 66 when it cannot be
        opened (another user's slab without permission)."""
        handle = ctypes.c_void_p()
        _capi.check(_capi.lib().tc_slab_attach(name.encode(), 1 if writable else 0, ctypes.byref(handle)))
        slab = cls(handle.value, writable)
        uid = slab.info(counts=False)["uid"]  # the mapped object's owner, not the name's looked up again
        if uid != os.geteuid() and not trust_owner:
            slab.close()
            raise TraincacheError(65, f"{name}: slab is owned by another user (uid {uid}); use trust_owner=True to "
                                      "share it, or another name")
        return slab

    @classmethod
    def create(cls, name: str, length: int, shape=None, dtype="uint8", *, slots=None, limit=None,
               variable: bool = False, selection: str = "first", seed: int = 0, mode: int = 0o600,
               content_id: str = "", temporary: bool = False) -> "Slab":
        """Creates slab `name` for a dataset of `length` items and attaches to it (writable).

        Fixed layout: every item has `shape` and `dtype`; `slots` (how many items are cacheable) or
        `limit` (a byte budget: an int or "2GiB") sets its size, every item when neither is given. Variable layout (`variable=True`):
        items of any length in an arena of `limit` bytes. `selection="hashed"` spreads the
        cacheable indices over the dataset (seeded by `seed`) instead of the first `slots`.
        `content_id` records what the slab holds (checked by whoever attaches); a `temporary` slab
        is listed as such and removed by `shm-cache rm --stale` once its creator has died.
        TraincacheError 73 when the name exists or /dev/shm has no room for it; 64 for bad options.
        """
        opts = _create_options(name, length, shape, dtype, slots, limit, variable, selection, seed, mode, content_id,
                               temporary)
        handle = ctypes.c_void_p()
        with _as_arguments():
            _capi.check(_capi.lib().tc_slab_create(json.dumps(opts).encode(), ctypes.byref(handle)))
        return cls(handle.value, True)

    @classmethod
    def open_shared(cls, name: str, length: int, shape, dtype="float32", *, slots=None, limit=None,
                    selection: str = "first", seed: int = 0, mode: int = 0o600, content_id: str = "",
                    temporary: bool = False, trust_owner: bool = False):
        """Attaches to slab `name`, or creates it (a fixed layout, arguments as create()) when there
        is none, as the tools share slabs (of processes racing to create it, the losers attach to
        the winner's), then checks it holds these items: TraincacheError 65 for another user's slab
        (unless `trust_owner`) or one of another length, shape, dtype, selection or content id;
        73 when it cannot be made. Returns (slab, created)."""
        opts = _create_options(name, length, shape, dtype, slots, limit, False, selection, seed, mode, content_id,
                               temporary)
        handle, created = ctypes.c_void_p(), ctypes.c_int()
        with _as_arguments():
            _capi.check(_capi.lib().tc_slab_open_shared(json.dumps(opts).encode(), 1 if trust_owner else 0,
                                                        ctypes.byref(handle), ctypes.byref(created)))
        return cls(handle.value, True), bool(created.value)

    def close(self) -> None:
        """Detaches. Views handed out by get() stay valid: the mapping goes when the last one does."""
        if self._handle is not None:
            _capi.lib().tc_slab_close(self._handle)
            self._handle = None
        self._ro = self._rw = None
        self._states = self._items = self._slot_map = None

    def remove(self) -> None:
        """Removes the slab's object from /dev/shm (attached processes keep their mappings) and closes."""
        _capi.check(_capi.lib().tc_slab_remove(self.name.encode()))
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if getattr(self, "_handle", None) is not None:
                self.close()
        except Exception:  # at interpreter shutdown the ctypes module may be gone already
            pass

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        what = f"{list(self.shape)} {self.dtype}" if self.shape else f"variable {self.dtype}"
        return f"<traincache.Slab {self.name!r}: {what}, {self.length} indices, {self.slots} cacheable>"

    def _h(self):
        if self._handle is None:
            raise ValueError(f"slab {self.name!r} is closed")
        return self._handle

    # --- reading ---------------------------------------------------------------------------

    def info(self, counts: bool = True) -> dict:
        """What `shm-cache stat --json NAME` prints as "slab" (slot counts when `counts`)."""
        return _capi.take_json(_capi.lib().tc_slab_describe, self._h(), 1 if counts else 0)

    def slot(self, index: int):
        """The slot of `index`, or None when the index is not cacheable."""
        s = _capi.lib().tc_slab_slot(self._h(), self._index(index))
        return None if s == -1 else _capi.check(s)

    def state(self, index: int):
        """"empty", "writing", "filled" or "invalid" for the slot of `index`; None when not cacheable."""
        s = _capi.lib().tc_slab_state(self._h(), self._index(index))
        return None if s == -1 else STATES[_capi.check(s)]

    def get(self, index: int, copy: bool = True):
        """The item at `index` as a numpy array (item shape, or 1-D for a variable layout), or None
        for a miss (not filled yet, being written, not cacheable). By default a private, writable
        copy, made by the library (TraincacheError 74 if the slab was truncated while in use).
        With `copy=False` a read-only view into shared memory (torch.from_numpy() shares it too):
        no copy, but see the module's notes on what a view cannot survive.

        With `copy=False` on x86-64, a fixed layout's item is found without calling the library:
        the slot's state word is read from the mapping (an acquire load there), and the view is an
        index into the items. A slot that is empty, being written or repaired is a miss; a
        SmartCache window's slot is a hit only while it holds this index's item (its word carries
        the key), and then a checked copy. A copy is one library call, which keeps the truncation
        guarantee (reading the mapping directly cannot)."""
        index = self._index(index)
        if not copy and self._states is not None:
            found = self._filled_slot(index)
            if found is None:
                return None
            slot, word = found
            return self._items[slot] if word == FILLED else self._checked_copy(index, slot, word)
        return self._read(index) if copy else self._view(index)

    def _filled_slot(self, index: int):
        """Read from the mapping (fixed layouts on x86-64 only): (slot, state word) when the slot of
        `index` holds its item (FILLED, or a SmartCache window's FILLED word carrying this index's
        key, which _checked_copy reads); None for a miss."""
        if index >= self.length:
            return None
        slot = index if self._slot_map is None else int(self._slot_map[index])
        if not 0 <= slot < self.slots:
            return None
        word = int(self._states[slot])
        if word == FILLED or (word & 0xFF == FILLED and word >> 8 == index + 1):
            return slot, word
        return None

    def _checked_copy(self, index: int, slot: int, word: int):
        """A window slot's item: copied, then kept only if the slot's word is still `word` (so the
        copy is neither torn nor another key's)."""
        item = self._read(index)
        return item if item is not None and int(self._states[slot]) == word else None

    def _read(self, index: int):
        """A private copy of the item at `index` made by the library, or None for a miss."""
        if self.shape is not None:
            out = np.empty(self.shape, dtype=self.dtype)
        else:
            view = self._view(index)  # the item's length
            if view is None:
                return None
            out = np.empty(view.shape, dtype=self.dtype)
        found = _capi.lib().tc_slab_read(self._h(), index, out.ctypes.data, out.nbytes, ctypes.byref(self._nbytes))
        return out if _capi.check(found) else None

    def _view(self, index: int):
        """A read-only view of the item at `index`, located by the library, or None for a miss."""
        handle, lib = self._h(), _capi.lib()
        offset, nbytes = ctypes.c_uint64(), ctypes.c_uint64()
        if not _capi.check(lib.tc_slab_locate(handle, index, ctypes.byref(offset), ctypes.byref(nbytes))):
            return None
        count, rest = divmod(nbytes.value, self.dtype.itemsize)
        if rest:
            raise TraincacheError(65, f"{self.name}: index {index}: an item of {nbytes.value} bytes is not a whole "
                                      f"number of {self.dtype} elements")
        view = np.frombuffer(self._ro, dtype=self.dtype, count=count, offset=offset.value)
        return view.reshape(self.shape) if self.shape is not None else view

    # --- writing ---------------------------------------------------------------------------

    def put(self, index: int, value) -> bool:
        """Stores `value` (array-like or torch tensor) at `index`: True when stored, False when the
        slot was filled or claimed by someone else, the index is not cacheable, or the arena is full.
        A fixed layout needs the item shape. Values are converted to the slab's dtype within their
        kind (float64 -> float32, rounded but never past float32's range), integers to any integer
        type they fit; never floats to integers, nor integers to floats unless exactly.
        Filled slots are never changed. The claim, the copy and the publication are one library
        call, so a KeyboardInterrupt never falls between them."""
        index, handle = self._index(index), self._h()
        ptr = self._item_pointer(value)
        if ptr is not None:  # already an item: stored from where it is
            return bool(_capi.check(_capi.lib().tc_slab_put(handle, index, ptr, self._item_bytes)))
        item = self._item(value)
        return bool(_capi.check(_capi.lib().tc_slab_put(handle, index, item.ctypes.data, item.nbytes)))

    def begin_write(self, index: int, nbytes: int):
        """Low level: claims the slot of `index` for `nbytes` (one compare-and-swap, EMPTY -> WRITING
        with this process's pid). The offset in the object where the bytes go, or None when nothing
        was claimed. Follow with commit() or abort(); put() does all three."""
        offset = ctypes.c_uint64()
        claimed = _capi.check(_capi.lib().tc_slab_begin_write(self._h(), self._index(index), int(nbytes),
                                                              ctypes.byref(offset)))
        return offset.value if claimed else None

    def commit(self, index: int) -> bool:
        """Publishes this process's claim on `index` (WRITING -> FILLED); False if it holds none."""
        return bool(_capi.check(_capi.lib().tc_slab_commit(self._h(), self._index(index))))

    def abort(self, index: int) -> bool:
        """Gives back this process's claim on `index` (WRITING -> EMPTY); False if it holds none."""
        return bool(_capi.check(_capi.lib().tc_slab_abort(self._h(), self._index(index))))

    def repair(self) -> int:
        """Returns to empty every slot left WRITING by a dead process (and every invalid one); how many."""
        return _capi.check(_capi.lib().tc_slab_repair(self._h()))

    # --- helpers ---------------------------------------------------------------------------

    def _index(self, index) -> int:
        """`index` as an int in 0..length-1: TypeError for what is not an integer (1.5 was read as
        1), IndexError past either end (2**64 + 3 wrapped to 3 in the library)."""
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(f"{self.name}: an index must be an integer, not {type(index).__name__}") from None
        if i < 0:
            raise IndexError(f"{self.name}: index {index} is negative")
        if i >= self.length:
            raise IndexError(f"{self.name}: index {index} is past the last one ({self.length - 1})")
        return i

    def _item_pointer(self, value):
        """The address of `value`'s elements when it already is an item of this fixed layout as it
        must be stored (a contiguous CPU torch tensor or numpy array of the slab's dtype and item
        shape, no gradient), else None: then _item converts it."""
        if self.shape is None:
            return None
        if type(value) is np.ndarray:
            if value.dtype == self.dtype and value.shape == self.shape and value.flags.c_contiguous:
                return value.__array_interface__["data"][0]
            return None
        if type(value).__name__ != "Tensor":
            return None
        if self._torch_item is None:  # torch's dtype and shape of an item, once (torch is loaded: value is one)
            torch = sys.modules["torch"]
            self._torch_item = (getattr(torch, self.dtype.name, None), torch.Size(self.shape))
        dtype, shape = self._torch_item
        if (value.dtype is dtype and value.shape == shape and value.device.type == "cpu" and not value.requires_grad
                and value.is_contiguous()):
            return value.data_ptr()
        return None

    def _item(self, value):
        a = _to_numpy(value, self.name)
        if a.size and not np.can_cast(a.dtype, self.dtype, casting="safe"):
            # Within their kind only: integers to an integer type they fit, floats to a float type
            # that holds them (rounded, never overflowing to inf); int64 to float32 would round
            # 2**40 + 1, so integers never become floats unless exactly (int16 -> float32).
            if a.dtype.kind in "iub" and self.dtype.kind in "iu":
                limits = np.iinfo(self.dtype)
                if a.min() < limits.min or a.max() > limits.max:
                    raise ValueError(f"{self.name}: values outside the range of {self.dtype}")
            elif a.dtype.kind == "f" and self.dtype.kind == "f":
                finite = a[np.isfinite(a)]
                if finite.size and np.abs(finite).max() > np.finfo(self.dtype).max:
                    raise ValueError(f"{self.name}: values outside the range of {self.dtype}")
            else:
                raise TypeError(f"{self.name}: cannot store {a.dtype} values in a {self.dtype} slab")
        if self.shape is not None and a.shape != self.shape:
            raise ValueError(f"{self.name}: item shape {list(a.shape)} is not the slab's {list(self.shape)}")
        out = np.ascontiguousarray(a, dtype=self.dtype)
        # numpy calls int64 -> float64 safe, but it rounds 2**53 + 1: integers become floats only exactly.
        if a.size and a.dtype.kind in "iu" and self.dtype.kind == "f" and not _exact(a, out):
            raise TypeError(f"{self.name}: {a.dtype} values that {self.dtype} cannot hold exactly (integers are "
                            "stored in a float slab only when no value is rounded)")
        return out


def remove_slab(name: str) -> None:
    """Removes slab `name` (as `shm-cache rm NAME`); TraincacheError 69 when there is none."""
    _capi.check(_capi.lib().tc_slab_remove(name.encode()))

