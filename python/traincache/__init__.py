"""traincache from Python: caches written by cache-fill as a torch Dataset, and the shared-memory
slabs of shm-cache and gc-train, shared by every process of a machine (docs/python.md).

    from traincache import CacheDataset, Slab, SharedCache

Slab and the cache description need libtraincache_c.so (built by `make`); CacheDataset reads with
h5py alone. CacheDataset and SharedCache import torch when first used.
"""
from ._capi import TraincacheError, describe_cache, library_path, version
from .slab import Slab, remove_slab

__all__ = ["CacheDataset", "CachedDataset", "SharedCache", "Slab", "cached", "TraincacheError", "describe_cache", "library_path",
           "remove_slab", "version"]


def __getattr__(name):
    # The torch-based parts load torch only when asked for.
    if name == "CacheDataset":
        from .cache import CacheDataset
        return CacheDataset
    if name in ("SharedCache", "CachedDataset", "cached"):
        from . import shared
        return getattr(shared, name)
    raise AttributeError(f"module 'traincache' has no attribute {name!r}")
