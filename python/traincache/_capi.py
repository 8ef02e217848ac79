"""The C ABI of libtraincache_c.so (libcore/include/traincache/c_api/c_api.h), loaded with ctypes.

The library is found, in this order, at $TRAINCACHE_LIBRARY, next to this file (a pip-installed
copy bundles it), in the build directory of the checkout this package lives in (`make` builds
build/lib/libtraincache_c.so), and where the dynamic linker finds it (an installed traincache).
"""
import ctypes
import ctypes.util
import json
import os
import threading

ABI_VERSION = 4
LIBRARY = "libtraincache_c.so"

_lock = threading.Lock()
_lib = None


class TraincacheError(RuntimeError):
    """A failure reported the way the tools report it: `code` is the exit code a tool would end
    with (64 usage, 65 bad data, 66 missing input, 69 unavailable, 70 internal, 73 cannot create,
    74 I/O) and str(error) the one-line message, "<subject>: <detail>"."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def candidates(system=True):
    """Where the library is looked for, in order (paths that may not exist); with system=False,
    without asking the dynamic linker's places (ctypes.util.find_library runs ldconfig and gcc)."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    if os.environ.get("TRAINCACHE_LIBRARY"):
        out.append(os.environ["TRAINCACHE_LIBRARY"])
    out.append(os.path.join(here, LIBRARY))
    out.append(os.path.join(os.path.dirname(os.path.dirname(here)), "build", "lib", LIBRARY))
    found = ctypes.util.find_library("traincache_c") if system else None
    if found:
        out.append(found)
    return out


def library_path() -> str:
    """The path of the library that will be (or was) loaded; TraincacheError(69) when none is found.
    The dynamic linker's places are asked only when none of the others holds it: every process
    that imports the package (each DataLoader worker, each rank) would otherwise start ldconfig and
    gcc."""
    if os.environ.get("TRAINCACHE_LIBRARY"):
        return os.environ["TRAINCACHE_LIBRARY"]  # an explicit choice is never second-guessed
    for p in candidates(system=False):
        if os.path.isfile(p):
            return p
    paths = candidates()
    for p in paths:
        if os.path.isfile(p) or not os.path.isabs(p):
            return p
    raise TraincacheError(69, f"{LIBRARY}: not found (looked in {', '.join(paths)}); build it with make, "
                              "or set TRAINCACHE_LIBRARY to its path")


_u64, _i64, _int, _p = ctypes.c_uint64, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
_PROTOTYPES = {
    "tc_abi_version": (_int, []),
    "tc_version": (ctypes.c_char_p, []),
    "tc_last_error": (ctypes.c_char_p, []),
    "tc_free": (None, [_p]),
    "tc_cache_describe": (_int, [ctypes.c_char_p, _int, ctypes.POINTER(_p)]),
    "tc_cache_check_structure": (_int, [ctypes.c_char_p]),
    "tc_slab_create": (_int, [ctypes.c_char_p, ctypes.POINTER(_p)]),
    "tc_slab_attach": (_int, [ctypes.c_char_p, _int, ctypes.POINTER(_p)]),
    "tc_slab_close": (None, [_p]),
    "tc_slab_describe": (_int, [_p, _int, ctypes.POINTER(_p)]),
    "tc_slab_fd": (_int, [_p]),
    "tc_slab_slot": (_i64, [_p, _u64]),
    "tc_slab_state": (_int, [_p, _u64]),
    "tc_slab_locate": (_int, [_p, _u64, ctypes.POINTER(_u64), ctypes.POINTER(_u64)]),
    "tc_slab_read": (_int, [_p, _u64, _p, _u64, ctypes.POINTER(_u64)]),
    "tc_slab_open_shared": (_int, [ctypes.c_char_p, _int, ctypes.POINTER(_p), ctypes.POINTER(_int)]),
    "tc_slab_put": (_int, [_p, _u64, _p, _u64]),
    "tc_slab_begin_write": (_int, [_p, _u64, _u64, ctypes.POINTER(_u64)]),
    "tc_slab_commit": (_int, [_p, _u64]),
    "tc_slab_abort": (_int, [_p, _u64]),
    "tc_slab_repair": (_i64, [_p]),
    "tc_slab_remove": (_int, [ctypes.c_char_p]),
}


def lib():
    """The loaded library with its prototypes declared (loaded once per process)."""
    global _lib
    with _lock:
        if _lib is None:
            path = library_path()
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                raise TraincacheError(69, f"{path}: cannot load: {e}") from None
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(handle, name)
                fn.restype, fn.argtypes = restype, argtypes
            if handle.tc_abi_version() != ABI_VERSION:
                raise TraincacheError(69, f"{path}: C ABI version {handle.tc_abi_version()}, this package needs "
                                          f"{ABI_VERSION}: rebuild it from the same checkout")
            _lib = handle
        return _lib


def check(rc: int) -> int:
    """rc when it is a result (>= 0); a negative rc raised as TraincacheError(-rc, last error)."""
    if rc < 0:
        raise TraincacheError(-rc, lib().tc_last_error().decode("utf-8", "replace"))
    return rc


def take_json(call, *args) -> dict:
    """Calls a function that hands out a JSON string through its last argument; the parsed value."""
    out = ctypes.c_void_p()
    check(call(*args, ctypes.byref(out)))
    try:
        return json.loads(ctypes.string_at(out.value).decode("utf-8"))
    finally:
        lib().tc_free(out)


def version() -> str:
    """The library's version, "0.1.0 (git REV)", as the tools' --version says it."""
    return lib().tc_version().decode()


def describe_cache(path, stats: bool = False) -> dict:
    """What `cache-inspect --json [--stats] PATH` prints for the file (its "files"[0] object)."""
    return take_json(lib().tc_cache_describe, os.fsencode(path), 1 if stats else 0)
