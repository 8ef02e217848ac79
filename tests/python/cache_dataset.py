"""CacheDataset over every kind of cache cache-fill writes (with and without labels, several label
columns picked by name, string,
integer and no keys, one and two encoders, float16, one made by --update), compared with the h5py recipe of
docs/cache-format.md run on the same file;
a DataLoader with 2 workers (fork and spawn) yields exactly those rows; info() is cache-inspect's
JSON; bad files and arguments fail with the documented error."""
import os
import shutil

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader

from tc_check import DATA, SOURCE, WORK, cache_fill, eq, finish, ok, raises, tool, tool_json
import traincache
from traincache import CacheDataset, TraincacheError

images = os.path.join(DATA, "images.h5")


# docs/cache-format.md's h5py recipe, run as written.
DOC = open(os.path.join(SOURCE, "docs", "cache-format.md")).read()
RECIPE = DOC.split("## Reading it from Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


def h5_rows(path):
    """Every row as the documented recipe reads it: ({name: embeddings}, labels or None, keys)."""
    scope = {}
    exec(RECIPE.replace('"cache.h5"', repr(path)), scope)
    keys = [int(k) if isinstance(k, (int, np.integer)) else str(k) for k in scope["keys"]]
    return scope["emb"], scope["labels"], keys


def updated_reads_like_a_full_fill():
    """A cache that cache-fill --update made (rows removed, moved, changed and added, by key) gives
    the items of a full fill of the new input: labels and keys to the bit, embeddings within the
    batch noise this machine shows, measured here (a full fill in batches of one row against the
    full fill: 4 times the largest difference; to the bit where it is 0)."""
    with h5py.File(images, "r") as src:
        x, y, k = src["images"][()], src["labels"][()], src["skeys"][()]
    old, new, inp = (os.path.join(WORK, n) for n in ("old-in.h5", "new-in.h5", "in.h5"))
    order = list(range(40, 260)) + list(range(0, 30))  # 30..39 removed, 0..29 moved last, 200..259 added
    with h5py.File(old, "w") as f:
        f["images"], f["labels"], f["skeys"] = x[:200], y[:200], k[:200]
    with h5py.File(new, "w") as f:
        changed = x[order]
        changed[5] = 255 - changed[5]  # input row 45's image rewritten
        f["images"], f["labels"], f["skeys"] = changed, y[order], k[order]
    args = ("--encoder", f"cnn={DATA}/cnn.pt", "--features", "images", "--labels", "labels", "--key", "skeys",
            "--batch-size", "16")
    shutil.copyfile(old, inp)
    updated = cache_fill("updated.h5", "--input", inp, *args)
    shutil.copyfile(new, inp)
    summary = tool_json("cache-fill", "-q", "--json", "--input", inp, *args, "--out", updated, "--update")
    eq({n: summary["update"][n] for n in ("added", "changed", "removed", "unchanged", "kept")},
       dict(added=60, changed=1, removed=10, unchanged=189, kept=189), "the update's tally (kept: 0.1's name)")
    full = cache_fill("full.h5", "--input", new, *args)
    one = cache_fill("one.h5", "--input", new, *args, "--batch-size", "1")
    a, b, c = (CacheDataset(p, keys=True) for p in (updated, full, one))
    eq(len(a), len(b), "an updated cache: length")
    rows = [(a[i][0].double(), b[i][0].double(), c[i][0].double()) for i in range(len(b))]
    noise = max(float((y - z).abs().max()) for _, y, z in rows)
    worst = max(float((x - y).abs().max()) for x, y, _ in rows)
    ok(worst <= 4 * noise, f"an updated cache: every item's embedding equals the full fill's (within {worst:.3g}; "
       f"batch noise {noise:.3g})")
    eq([(int(a[i][1]), a[i][2]) for i in range(len(a))], [(int(b[i][1]), b[i][2]) for i in range(len(b))],
       "an updated cache: every item's label and key equal the full fill's")


def label_columns_by_name():
    """A cache with several label columns (cache-fill --labels labels,NAME=TABLE:FIELD): labels=NAME
    gives that column, joined on the keys (the table's rows in another order, one key it does not
    use); the default is the first; an unknown name is refused naming the cache's columns."""
    with h5py.File(images, "r") as src:
        y, k = src["labels"][()], [s.decode() for s in src["skeys"][()]]
    table = os.path.join(WORK, "parity.csv")
    words = {k[i]: ("odd" if y[i] % 2 else "even") for i in range(len(k))}
    with open(table, "w") as f:
        f.write("key,parity\nnot-a-key,prime\n" + "".join(f"{key},{words[key]}\n" for key in reversed(k)))
    path = cache_fill("columns.h5", "--input", images, "--encoder", f"cnn={DATA}/cnn.pt", "--features", "images",
                      "--key", "skeys", "--labels", f"labels,p={table}:parity", "--rows", "0:64")
    names = ["even", "odd", "prime"]  # a manifest's string labels, numbered in sorted order
    want = [names.index(words[key]) for key in k[:64]]
    eq([int(item[1]) for item in CacheDataset(path, labels="p")], want, "labels='p': the joined column")
    eq([int(item[1]) for item in CacheDataset(path)], [int(v) for v in y[:64]], "the default: the first column")
    eq([int(item[1]) for item in CacheDataset(path, labels="p").subset(range(3, 7))], want[3:7], "a subset keeps it")
    raises(lambda: CacheDataset(path, labels="parity"), ValueError,
           f"{path}: no label column named 'parity' (the cache has labels, p)")
    raises(lambda: CacheDataset(path, labels=3), TypeError,
           f"{path}: labels must be None, a bool or a label column's name, not 3")


def main():
    label_columns_by_name()
    labelled = cache_fill("labelled.h5", "--input", images, "--encoder", f"cnn={DATA}/cnn.pt", "--features", "images",
                          "--labels", "labels", "--key", "skeys")
    int_keys = cache_fill("intkeys.h5", "--input", images, "--encoder", f"mlp={DATA}/mlp.pt", "--features", "vec",
                          "--key", "ikeys", "--rows", "10:250", "--dtype", "float16")
    two = cache_fill("two.h5", "--input", images, "--encoder", f"a={DATA}/cnn.pt", "--encoder",
                     f"b={DATA}/cnn_other.pt", "--features", "images", "--rows", "5:300")


    # --- items equal h5py's rows, for each kind of cache -------------------------------------------
    for path, kw, want_fields in (
            (labelled, dict(keys=True), ("cnn", "label", "key")),
            (int_keys, dict(keys=True), ("mlp", "key")),
            (two, dict(embeddings=["b", "a"], keys=True), ("b", "a", "key")),
            (two, dict(), ("a", "b")),
            (labelled, dict(labels=False), ("cnn",))):
        name = f"{os.path.basename(path)} {kw}"
        ds = CacheDataset(path, **kw)
        emb, labels, keys = h5_rows(path)
        eq(ds.fields, want_fields, f"{name}: fields")
        eq(len(ds), len(keys), f"{name}: length")
        for i in (0, 7, len(ds) - 1, -1):
            item = ds[i]
            row = i % len(ds)
            want = [emb[n][row] for n in want_fields if n in emb]
            if "label" in want_fields:
                want.append(labels[row])
            got_arrays = [t.numpy() for t, f in zip(item, want_fields) if f != "key"]
            ok(all(g.dtype == w.dtype and g.shape == np.shape(w) and np.array_equal(g, w) for g, w in zip(got_arrays, want)),
               f"{name}: item {i} equals h5py's row")
            if "key" in want_fields:
                eq(item[-1], keys[row], f"{name}: key of item {i}")

    eq(CacheDataset(int_keys, keys=True)[0][1], 1010, "integer keys come as int (ikeys of input row 10)")
    eq(CacheDataset(two, keys=True)[0][2], 5, "no key dataset: the key is the input row number")
    eq(CacheDataset(labelled, keys=True)[299][2], "img-0299", "string keys come as str")
    eq(CacheDataset(int_keys)[3][0].dtype, torch.float16, "float16 caches give float16 tensors")
    eq(CacheDataset(labelled)[4][1].shape, torch.Size([]), "a scalar label is a 0-d tensor")

    updated_reads_like_a_full_fill()

    # --- a DataLoader with 2 workers yields exactly the rows h5py reads -------------------------------
    for path, context in ((labelled, "fork"), (int_keys, "fork"), (two, "spawn")):
        ds = CacheDataset(path, keys=True)
        emb, labels, keys = h5_rows(path)
        order = torch.randperm(len(ds), generator=torch.Generator().manual_seed(3)).tolist()
        loader = DataLoader(ds, batch_size=32, sampler=order, num_workers=2, multiprocessing_context=context)
        batches = list(loader)
        got = {f: torch.cat([b[k] for b in batches]).numpy() for k, f in enumerate(ds.fields) if f != "key"}
        got_keys = [k for b in batches for k in (b[-1].tolist() if torch.is_tensor(b[-1]) else b[-1])]
        name = f"DataLoader(num_workers=2, {context}) over {os.path.basename(path)}"
        ok(all(np.array_equal(got[n], emb[n][order]) for n in emb), f"{name}: embeddings equal h5py's rows")
        if labels is not None:
            ok(np.array_equal(got["label"], labels[order]), f"{name}: labels equal h5py's")
        eq(got_keys, [keys[i] for i in order], f"{name}: keys")

    # A batch of scattered and repeated rows is read in one request, in the order asked.
    ds = CacheDataset(labelled)
    emb, labels, _ = h5_rows(labelled)
    idx = [299, 0, 150, 0, 3]
    items = ds.__getitems__(idx)
    ok(all(np.array_equal(it[0].numpy(), emb["cnn"][i]) and int(it[1]) == labels[i] for it, i in zip(items, idx)),
       "__getitems__: scattered and repeated rows, in order")
    raises(lambda: ds[300], IndexError, f"{labelled}: row 300 out of range for 300 rows")
    raises(lambda: ds.__getitems__([1, -2]), IndexError, f"{labelled}: row -2 out of range for 300 rows")
    # a float index was row int(index) (ds[1.5] gave row 1): refused, as a list refuses it
    raises(lambda: ds[1.5], TypeError, f"{labelled}: row indices must be integers, not float")
    raises(lambda: ds.__getitems__([0, 1.5]), TypeError, f"{labelled}: row indices must be integers, not float64")
    eq(ds[np.int64(3)][0].tolist(), ds[3][0].tolist(), "a numpy integer index is an index")
    # A nested list was read as rows of rows (one item of two rows each); arguments of the wrong type
    # got Python's own words ("'int' object is not iterable") (issue 84, messages).
    raises(lambda: ds.__getitems__([[1, 2]]), TypeError,
           f"{labelled}: row indices must be a flat list of integers, not of shape [1, 2]")
    raises(lambda: CacheDataset(labelled, embeddings=5), TypeError,
           f"{labelled}: embeddings must be a name or a list of names, not 5")
    raises(lambda: CacheDataset(None), TypeError,
           "traincache.CacheDataset: the path must be a str or os.PathLike, not NoneType")

    # --- views: rows=, subset(), random_split() (issue 85, goal 7) -------------------------------------
    # torch 1.13's Subset (and so random_split) reads each row on its own: a view reads a DataLoader
    # batch with one request per dataset on any torch, holding the rows torch's own split would.
    full = CacheDataset(labelled, keys=True)
    view = CacheDataset(labelled, keys=True, rows=range(290, 300))
    eq([(len(view), view[i][2]) for i in (0, 9)], [(10, "img-0290"), (10, "img-0299")], "rows=: item i is cache row rows[i]")
    ok(all(torch.equal(view[i][0], full[290 + i][0]) for i in range(10)), "rows=: the rows' embeddings")
    eq([x[2] for x in view.subset([9, 0, 9])], ["img-0299", "img-0290", "img-0299"], "a view of a view, repeats kept")
    raises(lambda: CacheDataset(labelled, rows=[0, 300]), IndexError, f"{labelled}: row 300 out of range for 300 rows")
    raises(lambda: CacheDataset(labelled, rows=[0.5]), TypeError,
           f"{labelled}: rows must be a flat list of integers, not float64 of shape [1]")
    raises(lambda: view.subset([10]), IndexError, f"{labelled}: row 10 out of range for 10 rows")
    parts = full.random_split([0.8, 0.2], generator=torch.Generator().manual_seed(3))
    theirs = torch.utils.data.random_split(full, [240, 60], generator=torch.Generator().manual_seed(3))
    eq([[x[2] for x in p] for p in parts], [[full[i][2] for i in p.indices] for p in theirs],
       "random_split: the rows torch's random_split gives for the same generator")
    reads = []
    plain_read = CacheDataset._read
    CacheDataset._read = staticmethod(lambda dset, idx: reads.append(len(idx)) or plain_read(dset, idx))
    try:
        batches = [b for b in DataLoader(parts[0], batch_size=64)]
    finally:
        CacheDataset._read = staticmethod(plain_read)
    eq((len(batches), reads), (4, [64] * 9 + [48] * 3),
       "a view's batch: one read of its rows per dataset (embeddings, labels, keys)")

    # --- info() is cache-inspect --json --------------------------------------------------------------
    for path in (labelled, int_keys, two):
        eq(CacheDataset(path).info(), tool_json("cache-inspect", "--json", path)["files"][0],
           f"info() of {os.path.basename(path)} equals cache-inspect --json")
    eq(traincache.describe_cache(labelled, stats=True), tool_json("cache-inspect", "--json", "--stats", labelled)["files"][0],
       "describe_cache(stats=True) equals cache-inspect --json --stats")
    eq(CacheDataset(labelled).info()["labels"]["counts"], {str(c): 60 for c in range(5)}, "info(): label counts")

    # --- errors ---------------------------------------------------------------------------------------
    # Bad files: the same exit code and message as cache-inspect (one library checks both).
    missing = os.path.join(WORK, "missing.h5")
    huge = os.path.join(WORK, "huge.h5")  # a dataset claiming far more bytes than the file holds
    with h5py.File(huge, "w") as f:
        f.attrs.update({"format": "traincache", "format_version": 1, "complete": 1, "rows": 10 ** 9})
        f.create_dataset("embeddings/x", shape=(10 ** 9, 64), dtype=np.float32, chunks=(1024, 64))
        f["embeddings/x"][0] = 1
    for path in (missing, WORK, os.path.join(DATA, "foreign.h5"), os.path.join(DATA, "truncated.h5"), huge):
        p = tool("cache-inspect", path, check=False)
        message = p.stderr.strip().removeprefix("cache-inspect: error: ")
        ok(p.returncode in (65, 66) and message, f"cache-inspect refuses {path}")
        raises(lambda: CacheDataset(path), TraincacheError, message, p.returncode)
        raises(lambda: traincache.describe_cache(path), TraincacheError, message, p.returncode)
    altered = os.path.join(WORK, "altered.h5")
    with open(labelled, "rb") as src, open(altered, "wb") as dst:
        dst.write(src.read())
    with h5py.File(altered, "r+") as f:
        f.attrs["complete"] = 0
    raises(lambda: CacheDataset(altered), TraincacheError, f"{altered}: incomplete (complete attribute is not 1)", 65)
    with h5py.File(altered, "r+") as f:
        f.attrs["complete"], f.attrs["format_version"] = 1, 2
    raises(lambda: CacheDataset(altered), TraincacheError,
           f"{altered}: format version 2 is newer than this tool reads (1)", 65)
    # A cache damaged in its structure is refused at once, as --check, --export and gc-train refuse it
    # (issue 84, item 9: numpy's IndexError or TypeError came from a worker, integer and float64
    # embeddings were served).
    def replaced(f, name, change):
        data = change(f[name][()])
        del f[name]
        f[name] = data

    for name, change, problem in (
            ("labels", lambda x: x[:250], "/labels has 250 rows, expected 300"),
            ("embeddings/cnn", lambda x: x.astype(np.int32), "/embeddings/cnn holds int32, not float32 or float16"),
            ("embeddings/cnn", lambda x: x.astype(np.float64), "/embeddings/cnn holds float64, not float32 or float16"),
            ("keys", lambda x: np.stack([x, x], 1), "/keys is not one key per row (1-D)")):
        with open(labelled, "rb") as src, open(altered, "wb") as dst:
            dst.write(src.read())
        with h5py.File(altered, "r+") as f:
            replaced(f, name, change)
        raises(lambda: CacheDataset(altered), TraincacheError,
               f"{altered}: damaged: {problem} (cache-inspect --check lists what is wrong)", 65)
    raises(lambda: CacheDataset(int_keys, labels=True), ValueError,
           f"{int_keys}: the cache has no labels (cache-fill ran without --labels); use labels=False")
    raises(lambda: CacheDataset(two, embeddings=["a", "c"]), ValueError, f"{two}: no embeddings named c (the cache has a, b)")
    finish()


if __name__ == "__main__":
    main()
