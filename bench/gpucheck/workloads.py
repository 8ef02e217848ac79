"""gpu-check's workloads: JPEG files in class folders, photos of mixed sizes, damaged files, raw
image rows and models, made on the CPU (before any GPU work)."""
import os
import shutil

# Photo sizes (width, height) and their weights: ImageNet-like, most near 500x375, portraits,
# squares, a few large phone-sized frames and small thumbnails.
PHOTO_SIZES = [((500, 375), 30), ((375, 500), 10), ((500, 333), 12), ((333, 500), 5), ((640, 480), 10),
               ((480, 640), 5), ((500, 500), 6), ((800, 600), 6), ((1024, 768), 5), ((1280, 720), 4),
               ((300, 225), 5), ((256, 192), 2)]
_BANK = []


# ---- workload ----------------------------------------------------------------------------------
def _make_images(args):
    import numpy as np
    from PIL import Image
    root, first, count, size, classes = args
    rng = np.random.default_rng(first)
    for i in range(first, first + count):
        # Smooth structure plus grain, as photographs compress (random noise would not).
        base = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        img = Image.fromarray(base).resize((size, size), Image.BICUBIC)
        arr = np.asarray(img).astype(np.int16) + rng.integers(-12, 13, (size, size, 3))
        Image.fromarray(arr.clip(0, 255).astype(np.uint8)).save(
            os.path.join(root, f"c{i % classes}", f"{i:06d}.jpg"), quality=90)


def make_workload(work, rows, size=256, classes=10, images=True):
    """The 20,000-image workload's folder (made once; not with images=False, for a run of the
    large stage alone, which has photos of its own), the ResNet-50 and the reader-only encoder."""
    from multiprocessing import Pool
    import torch
    import torchvision
    imgs = os.path.join(work, "images")
    if images and not os.path.exists(os.path.join(imgs, ".done")):
        for c in range(classes):
            os.makedirs(os.path.join(imgs, f"c{c}"), exist_ok=True)
        step = 500
        with Pool(os.cpu_count()) as pool:
            pool.map(_make_images, [(imgs, a, min(step, rows - a), size, classes) for a in range(0, rows, step)])
        open(os.path.join(imgs, ".done"), "w").close()
    model = os.path.join(work, "resnet50.pt")
    if not os.path.exists(model):
        torch.manual_seed(0)
        m = torchvision.models.resnet50(weights=None)
        m.fc = torch.nn.Identity()
        torch.jit.script(m.eval()).save(model)
    mean = os.path.join(work, "mean.pt")
    if not os.path.exists(mean):
        class Mean(torch.nn.Module):
            def forward(self, x):
                return x.mean(dim=(2, 3))
        torch.jit.script(Mean()).save(mean)
    return imgs, model, mean


def train_head(path, d_in=2048, hidden=1024, d_out=256):
    """gc-train's mlp:1024,256 head as a TorchScript file (nn.Linear's initialisation, seed 0), so
    that gc-train and GradCache start from the same weights."""
    import torch

    class Head(torch.nn.Module):
        def __init__(self, d_in: int, hidden: int, d_out: int):
            super().__init__()
            self.fc1 = torch.nn.Linear(d_in, hidden)
            self.fc2 = torch.nn.Linear(hidden, d_out)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))
    torch.manual_seed(0)
    torch.jit.script(Head(d_in, hidden, d_out)).save(path)


def _crop_rows(args):
    """The centre size x size of each JPEG in `paths`, as uint8 [n, 3, size, size]."""
    import numpy as np
    from PIL import Image
    paths, size = args
    out = np.empty((len(paths), 3, size, size), np.uint8)
    for k, path in enumerate(paths):
        img = np.asarray(Image.open(path).convert("RGB"))
        top, left = (img.shape[0] - size) // 2, (img.shape[1] - size) // 2
        out[k] = img[top:top + size, left:left + size].transpose(2, 0, 1)
    return out


def raw_workload(work, imgs, rows, size=224, classes=10):
    """The raw-input workload of issue #47: `rows` images of the fill's folders, cropped to
    size x size, as uint8 in raw.h5 ('images', 'labels': the class folder), and a torchvision
    ResNet-18 with GroupNorm (no batch statistics, so gradient caching is exact) and a 128-wide
    output, as TorchScript (seed 0)."""
    from multiprocessing import Pool
    import h5py
    import numpy as np
    import torch
    import torchvision
    data, model = os.path.join(work, "raw.h5"), os.path.join(work, "resnet18_gn.pt")
    if not os.path.exists(data):
        paths = sorted(os.path.join(imgs, c, f) for c in os.listdir(imgs) if c.startswith("c")
                       for f in os.listdir(os.path.join(imgs, c)))[:rows]
        labels = np.array([int(os.path.basename(os.path.dirname(p))[1:]) for p in paths], np.int64)
        step = 256
        with Pool(os.cpu_count()) as pool:
            parts = pool.map(_crop_rows, [(paths[a:a + step], size) for a in range(0, len(paths), step)])
        with h5py.File(data + ".tmp", "w") as f:
            f["images"] = np.concatenate(parts)
            f["labels"] = labels
        os.replace(data + ".tmp", data)
    if not os.path.exists(model):
        torch.manual_seed(0)
        m = torchvision.models.resnet18(num_classes=128, norm_layer=lambda c: torch.nn.GroupNorm(32, c))
        torch.jit.script(m).save(model)
    return data, model


def _photo(rng, size, grey):
    """A `size` window, at a random place and maybe mirrored, of one of eight smooth random pictures
    with a photograph's grain (made once a process: only the JPEG encoding costs per file)."""
    import numpy as np
    from PIL import Image
    if not _BANK:
        g = np.random.default_rng(7)
        for _ in range(8):
            base = Image.fromarray(g.integers(0, 256, (20, 20, 3), dtype=np.uint8)).resize((1280, 1280), Image.BICUBIC)
            arr = np.asarray(base).astype(np.int16) + g.integers(-12, 13, (1280, 1280, 3), dtype=np.int16)
            _BANK.append(Image.fromarray(arr.clip(0, 255).astype(np.uint8)))
    w, h = size
    oy, ox = int(rng.integers(0, 1281 - h)), int(rng.integers(0, 1281 - w))
    img = _BANK[int(rng.integers(len(_BANK)))].crop((ox, oy, ox + w, oy + h))
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    return img.convert("L") if grey else img


def _make_photos(args):
    """JPEG files of mixed sizes, as photo collections hold them: sizes from PHOTO_SIZES, quality 75
    to 95, 4:2:0 mostly, one in eight 4:4:4, one in ten progressive, one in a hundred grey."""
    import numpy as np
    root, first, count, classes = args
    rng = np.random.default_rng(first + 1)
    sizes = [s for s, _ in PHOTO_SIZES]
    weights = np.array([w for _, w in PHOTO_SIZES], float)
    for i in range(first, first + count):
        size = sizes[rng.choice(len(sizes), p=weights / weights.sum())]
        img = _photo(rng, size, grey=rng.random() < 0.01)
        img.save(os.path.join(root, f"c{i % classes}", f"{i:06d}.jpg"), quality=int(rng.choice([75, 85, 90, 95])),
                 subsampling=0 if rng.random() < 0.125 else 2, progressive=bool(rng.random() < 0.1))


def make_photos(work, rows, classes=10):
    """`rows` JPEG files of mixed sizes in class folders under WORK/photos (made once, in parallel)."""
    from multiprocessing import Pool
    imgs = os.path.join(work, f"photos{rows}")
    if not os.path.exists(os.path.join(imgs, ".done")):
        for c in range(classes):
            os.makedirs(os.path.join(imgs, f"c{c}"), exist_ok=True)
        step = 500
        with Pool(os.cpu_count()) as pool:
            pool.map(_make_photos, [(imgs, a, min(step, rows - a), classes) for a in range(0, rows, step)])
        open(os.path.join(imgs, ".done"), "w").close()
    return imgs


def make_damaged(work, classes=2):
    """A small folder of what breaks decoders: JPEGs cut at several points (a baseline and a
    progressive one among them), a header alone, a grey, a 4:2:2, a CMYK file, beside whole photos."""
    import io
    import numpy as np
    root = os.path.join(work, "damaged")
    shutil.rmtree(root, ignore_errors=True)
    for c in range(classes):
        os.makedirs(os.path.join(root, f"c{c}"))
    rng = np.random.default_rng(3)
    def jpeg(img, **kw):
        b = io.BytesIO()
        img.save(b, "JPEG", quality=90, **kw)
        return b.getvalue()
    whole = [jpeg(_photo(rng, (500, 375), False)) for _ in range(10)]
    files = whole + [
        whole[0][:len(whole[0]) // 2], whole[1][:int(len(whole[1]) * 0.9)], whole[2][:600],
        jpeg(_photo(rng, (480, 640), False), progressive=True)[:20000],
        jpeg(_photo(rng, (500, 375), True)), jpeg(_photo(rng, (500, 375), False), subsampling=1),
        jpeg(_photo(rng, (400, 300), False).convert("CMYK"))]
    for i, data in enumerate(files):
        with open(os.path.join(root, f"c{i % classes}", f"{i:03d}.jpg"), "wb") as f:
            f.write(data)
    return root


def _traincache_text():
    """scripts/traincache_text.py (WordNet's reader)."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                    "scripts"))
    import traincache_text
    return traincache_text


def wordnet_root():
    """TRAINCACHE_WORDNET, /usr/share/wordnet or the GPU recipe's /opt/deps/usr/share/wordnet:
    the first that holds wordnet-base's data files."""
    roots = [os.environ.get("TRAINCACHE_WORDNET", ""), "/usr/share/wordnet", "/opt/deps/usr/share/wordnet"]
    root = next((r for r in roots if r and os.path.exists(os.path.join(r, "data.noun"))), None)
    if root is None:
        raise RuntimeError("no WordNet (wordnet-base's data.noun) in " + ", ".join(r for r in roots if r))
    return root


def make_texts(path, rows, seed=7):
    """Heavy-tailed texts (issue #88's text job) as JSON Lines: WordNet glosses, one in twenty a
    passage of k glosses with k from a Pareto law (alpha 1.1, at most 80), which the model cuts at
    its length (WordNet: wordnet_root()). Returns the lengths' median, 99th percentile and maximum."""
    import json
    import random
    tt = _traincache_text()
    glosses = [g for _, g in tt.wordnet_pairs(wordnet_root())]
    rng = random.Random(seed)
    texts = []
    for _ in range(rows):
        if rng.random() < 0.95:
            texts.append(glosses[rng.randrange(len(glosses))])
        else:
            texts.append(" ".join(rng.sample(glosses, min(80, int(rng.paretovariate(1.1)) + 1))))
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    lengths = sorted(len(t) for t in texts)
    return {"rows": rows, "median_chars": lengths[rows // 2], "p99_chars": lengths[rows * 99 // 100],
            "max_chars": lengths[-1]}


def make_pairs(path, batch, steps, seed=2):
    """(word, gloss) pairs from WordNet for fine-tuning, `batch` * `steps` of them in file order,
    one gloss in every 64 replaced by a passage of 40 glosses (cut at the model's length), as
    bench/run-bench's minilm_train "heavy" set holds one in each batch of 64."""
    import json
    import random
    tt = _traincache_text()
    pairs = tt.wordnet_pairs(wordnet_root())
    glosses = [g for _, g in pairs[:2000]]
    rng = random.Random(seed)
    rows = [{"q": w, "p": g} for w, g in pairs[5000:5000 + batch * steps]]
    for b in range(0, len(rows), 64):
        rows[b + rng.randrange(min(64, len(rows) - b))]["p"] = " ".join(rng.sample(glosses, 40))
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
