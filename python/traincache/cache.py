"""CacheDataset: a map-style torch Dataset over a cache file written by cache-fill
(docs/cache-format.md). The file is checked once by the library cache-inspect uses (the same checks
and messages), then read with h5py, opened lazily in each process that reads it.
"""
import copy
import os

import h5py
import numpy as np
import torch

from . import _capi
from ._capi import TraincacheError

class CacheDataset(torch.utils.data.Dataset):
    """Rows of a cache file as a torch Dataset: item i is a tuple of the selected parts of row i,
    in this order: each embedding named in `embeddings`, then the label, then the key.

    embeddings: a name, a list of names, or None for every encoder of the cache (file order).
    labels:     None (default) includes the label when the cache has labels (its first label
                column, /labels); True requires them; False leaves them out; a name picks that label
                column (cache-fill --labels NAME=SOURCE,...; ValueError naming the cache's columns
                when it has none of that name).
    keys:       True adds the row's key: its stored key (str for string keys, int for integer keys)
                or, for caches made without --key, the input row number (row_start + i), as
                cache-inspect shows it.
    rows:       None for every row, or the cache rows this Dataset holds, in its order (a list,
                range or integer array): item i is cache row rows[i], and a batch of them is still
                one read per dataset. subset() and random_split() make such views.

    Embeddings and labels come as tensors of the stored dtype (float32 or float16 embeddings),
    keys as str or int, so the default collate_fn batches them. `fields` names the tuple's parts.
    The file is opened on first use in each process (DataLoader workers each open their own) and a
    batch of indices is read in one request (`__getitems__`).
    """

    def __init__(self, path, embeddings=None, labels=None, keys: bool = False, rows=None):
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise TypeError(f"traincache.CacheDataset: the path must be a str or os.PathLike, not "
                            f"{type(path).__name__}")
        self.path = os.fspath(path)
        desc = _capi.describe_cache(self.path)  # TraincacheError 66 (missing), 65 (not a sound cache)
        if not desc["complete"]:
            raise TraincacheError(65, f"{self.path}: incomplete (complete attribute is not 1)")
        names = [e["name"] for e in desc["embeddings"]]
        if not names:
            raise TraincacheError(65, f"{self.path}: no embeddings")
        # What --check refuses in structure (short datasets, integer or float64 embeddings, 2-D keys)
        # is refused here, before a worker reads a row: 65, as gc-train and --export refuse it.
        _capi.check(_capi.lib().tc_cache_check_structure(os.fsencode(self.path)))
        if embeddings is None:
            chosen = names
        else:
            chosen = [embeddings] if isinstance(embeddings, str) else embeddings
            if not isinstance(chosen, (list, tuple)) or not all(isinstance(n, str) for n in chosen):
                raise TypeError(f"{self.path}: embeddings must be a name or a list of names, not {embeddings!r}")
            chosen = list(chosen)
            unknown = [n for n in chosen if n not in names]
            if unknown or not chosen:
                raise ValueError(f"{self.path}: no embeddings named {', '.join(unknown) or '(none given)'} "
                                 f"(the cache has {', '.join(names)})")
        has_labels = desc["labels"] is not None
        if labels and not has_labels:
            raise ValueError(f"{self.path}: the cache has no labels (cache-fill ran without --labels); "
                             "use labels=False")
        self._label_dataset = "labels"
        if isinstance(labels, str):
            columns = {c["name"]: c["dataset"] for c in desc["label_columns"]}
            if labels not in columns:
                raise ValueError(f"{self.path}: no label column named {labels!r} "
                                 f"(the cache has {', '.join(columns) or 'none'})")
            self._label_dataset = columns[labels].lstrip("/")
        elif labels is not None and not isinstance(labels, bool):
            raise TypeError(f"{self.path}: labels must be None, a bool or a label column's name, not {labels!r}")
        self.cache_rows, self.row_start = desc["rows"], desc["row_start"]
        self._rows = None if rows is None else self._checked_rows(rows)
        self.rows = self.cache_rows if self._rows is None else len(self._rows)
        self._has_key_dataset = desc["keys"] is not None
        self._key_is_string = self._has_key_dataset and desc["keys"]["dtype"] == "string"
        self.embeddings = chosen
        self.labels = has_labels if labels is None else bool(labels)
        self.keys = bool(keys)
        self.fields = tuple(self.embeddings) + (("label",) if self.labels else ()) + (("key",) if self.keys else ())
        self._file = None
        self._pid = None

    def __len__(self) -> int:
        return self.rows

    def _checked_rows(self, rows):
        """`rows` as an int64 array of cache rows: TypeError for anything but integers, IndexError
        for a row outside the cache."""
        raw = np.asarray(rows)
        if raw.ndim != 1 or (raw.size and raw.dtype.kind not in "iu"):
            raise TypeError(f"{self.path}: rows must be a flat list of integers, not {raw.dtype} of shape "
                            f"{list(raw.shape)}")
        idx = raw.astype(np.int64)
        bad = idx[(idx < 0) | (idx >= self.cache_rows)]
        if bad.size:
            raise IndexError(f"{self.path}: row {bad[0]} out of range for {self.cache_rows} rows")
        return idx

    def subset(self, indices) -> "CacheDataset":
        """A view of items `indices` of this Dataset (as torch's Subset), reading a batch in one
        request per dataset on any torch (torch 1.13's Subset reads each row on its own)."""
        view = copy.copy(self)
        positions = np.asarray(indices)
        if positions.ndim != 1 or (positions.size and positions.dtype.kind not in "iu"):
            raise TypeError(f"{self.path}: indices must be a flat list of integers")
        positions = positions.astype(np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= self.rows):
            bad = positions[(positions < 0) | (positions >= self.rows)][0]
            raise IndexError(f"{self.path}: row {bad} out of range for {self.rows} rows")
        view._rows = positions if self._rows is None else self._rows[positions]
        view.rows = len(view._rows)
        view._file, view._pid = None, None
        return view

    def random_split(self, lengths, generator=None) -> list:
        """torch.utils.data.random_split(self, lengths, generator) as CacheDataset views: the same
        rows in each part for the same generator, each part read a batch at a time."""
        parts = torch.utils.data.random_split(range(self.rows), lengths, generator=generator)
        return [self.subset(list(p.indices)) for p in parts]

    def info(self, stats: bool = False) -> dict:
        """What `cache-inspect --json [--stats] PATH` prints for this file (its "files"[0] object)."""
        return _capi.describe_cache(self.path, stats)

    def __getitem__(self, index):
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool):
            # int(1.5) would be row 1: a float index is a bug in the caller, as it is for a list
            raise TypeError(f"{self.path}: row indices must be integers, not {type(index).__name__}")
        i = int(index)
        if i < -self.rows or i >= self.rows:
            raise IndexError(f"{self.path}: row {index} out of range for {self.rows} rows")
        return self.__getitems__([i % self.rows])[0]

    def __getitems__(self, indices):
        """The items of `indices` (a list), read with one request per dataset."""
        raw = np.asarray(indices)
        if raw.ndim != 1:  # a nested list read as rows of rows, one item of each
            raise TypeError(f"{self.path}: row indices must be a flat list of integers, not of shape {list(raw.shape)}")
        if raw.size and raw.dtype.kind not in "iu":
            raise TypeError(f"{self.path}: row indices must be integers, not {raw.dtype}")
        idx = raw.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.rows):
            bad = idx[(idx < 0) | (idx >= self.rows)][0]
            raise IndexError(f"{self.path}: row {bad} out of range for {self.rows} rows")
        if self._rows is not None:
            idx = self._rows[idx]
        f = self._handle()
        columns = [self._read(f[f"embeddings/{n}"], idx) for n in self.embeddings]
        if self.labels:
            columns.append(self._read(f[self._label_dataset], idx))
        parts = [[torch.from_numpy(np.asarray(c[j])) for j in range(len(idx))] for c in columns]
        if self.keys:
            parts.append(self._keys(f, idx))
        return [tuple(p[j] for p in parts) for j in range(len(idx))]

    def _handle(self):
        # One h5py file per process: an HDF5 handle inherited through fork() is not safe to use.
        if self._file is None or self._pid != os.getpid():
            self._file = h5py.File(self.path, "r")
            self._pid = os.getpid()
        return self._file

    @staticmethod
    def _read(dset, idx):
        """dset[idx] for any order and repeats: one contiguous read when the rows are close together,
        else one sorted point selection."""
        if not idx.size:
            return dset[0:0]
        lo, hi = int(idx.min()), int(idx.max()) + 1
        if hi - lo <= 4 * idx.size:
            return dset[lo:hi][idx - lo]
        unique, inverse = np.unique(idx, return_inverse=True)
        return dset[unique][inverse]

    def _keys(self, f, idx):
        if not self._has_key_dataset:
            return [self.row_start + int(i) for i in idx]
        dset = f["keys"].asstr() if self._key_is_string else f["keys"]
        values = self._read(dset, idx)
        return [str(v) for v in values] if self._key_is_string else [int(v) for v in values]

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_file"] = None
        state["_pid"] = None
        return state
