"""The Python pipeline users run today, as the reference for cache-fill's image inputs.

  images_reference.py make DIR         writes an ImageFolder of mixed sizes and modes, a subfolder
                                       of EXIF-oriented JPEGs, and flat.pt (an encoder that returns
                                       its input flattened, so a cache holds the preprocessed tensors)
                                       into DIR, made beside it and renamed into place (the tests'
                                       fixtures.images makes it once under tests/data); nothing
                                       when DIR exists
  images_reference.py compare DIR CACHE CONFIG [DIR CACHE CONFIG ...]
                                       compares the cache's rows with torchvision's transforms on
                                       PIL images for CONFIG (see CONFIGS); prints one line of figures
                                       for each, starting with CONFIG (draft: JPEGs decoded
                                       reduced by PIL's Image.draft(), asked for the size
                                       Resize(DRAFT_RESIZE) makes of the file, then resized to it)
"""
import json
import os
import struct
import sys
import tempfile
import zlib

import h5py
import numpy as np
import torch
from PIL import Image, ImageOps
from torchvision import datasets
from torchvision import transforms as T

IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
# name -> (transforms, PIL mode of the loader, exif transpose, mean/std for the tolerance)
CONFIGS = {
    "rgb": ([T.Resize(40), T.CenterCrop(36), T.ToTensor(), T.Normalize(*IMAGENET)], "RGB", False, IMAGENET),
    "gray": ([T.Resize((30, 45)), T.ToTensor(), T.Normalize([0.5], [0.25])], "L", False, ([0.5], [0.25])),
    "pad": ([T.Resize(48), T.CenterCrop(64), T.ToTensor()], "RGB", True, ([0.0], [1.0])),
    "draft": ([T.CenterCrop(12), T.ToTensor()], "RGB", False, ([0.0], [1.0])),  # after draft_resize
}
DRAFT_RESIZE = 14


def resized_size(width, height, short):
    """torchvision's Resize(short) of a width x height image: (new width, new height)."""
    if width <= height:
        return short, int(short * height / width)
    return int(short * width / height), short


def draft_resize(img):
    """What cache-fill --resize DRAFT_RESIZE --jpeg-draft does before the crop, the PIL way: a JPEG
    decoded reduced by draft() for the size the resize makes of the file, then resized there."""
    size = resized_size(*img.size, DRAFT_RESIZE)
    if img.format == "JPEG":
        img.draft(img.mode, size)
    img.load()
    return img.convert("RGB").resize(size, Image.BILINEAR)


def png16(path, rgb):
    """A 16-bit RGB PNG (PIL cannot write one): raw rows behind filter byte 0."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].astype(">u2").tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def smooth(rng, h, w, c):
    """A natural-looking image: smooth gradients plus noise (random noise alone is atypical)."""
    y, x = np.mgrid[0:h, 0:w]
    chans = [128 + 100 * np.sin(x / rng.uniform(3, 15) + rng.uniform(0, 6)) * np.cos(y / rng.uniform(3, 15))
             for _ in range(c)]
    a = np.stack(chans, -1) + rng.normal(0, 12, (h, w, c))
    return np.clip(a, 0, 255).astype(np.uint8)


def make(root):
    rng = np.random.default_rng(12)
    folder = os.path.join(root, "mixed")
    kinds = ["jpeg_rgb", "jpeg_gray", "png_rgb", "png_gray", "png_rgba", "png_la", "png_pal", "png_1bit", "png16"]
    for k, kind in enumerate(kinds):
        os.makedirs(os.path.join(folder, kind), exist_ok=True)
        for i in range(32):
            h, w = int(rng.integers(20, 120)), int(rng.integers(20, 120))
            path = os.path.join(folder, kind, f"{i:03d}")
            rgb = smooth(rng, h, w, 3)
            if kind == "jpeg_rgb":
                Image.fromarray(rgb).save(path + ".jpg", quality=int(rng.integers(70, 96)),
                                          subsampling=int(rng.integers(0, 3)))
            elif kind == "jpeg_gray":
                Image.fromarray(rgb[..., 0]).save(path + ".jpeg", quality=90)
            elif kind == "png_rgb":
                Image.fromarray(rgb).save(path + ".png")
            elif kind == "png_gray":
                Image.fromarray(rgb[..., 1]).save(path + ".PNG")
            elif kind == "png_rgba":
                Image.fromarray(np.dstack([rgb, rng.integers(0, 256, (h, w, 1), dtype=np.uint8)])).save(path + ".png")
            elif kind == "png_la":
                Image.fromarray(np.dstack([rgb[..., :2]])).convert("LA").save(path + ".png")
            elif kind == "png_pal":
                Image.fromarray(rgb).convert("P", palette=Image.ADAPTIVE, colors=int(rng.integers(4, 256))).save(
                    path + ".png")
            elif kind == "png_1bit":
                Image.fromarray(rgb[..., 2]).convert("1").save(path + ".png")
            else:
                png16(path + ".png", rgb.astype(np.uint16) * 257 + rng.integers(0, 257, rgb.shape, dtype=np.uint16))
    oriented = os.path.join(root, "oriented", "all")
    os.makedirs(oriented)
    for o in range(1, 9):
        for i in range(3):
            img = Image.fromarray(smooth(rng, int(rng.integers(30, 90)), int(rng.integers(30, 90)), 3))
            exif = Image.Exif()
            exif[0x0112] = o
            img.save(os.path.join(oriented, f"o{o}_{i}.jpg"), quality=92, exif=exif.tobytes())
        png = Image.fromarray(smooth(rng, 40, 70, 3))
        exif = Image.Exif()
        exif[0x0112] = o
        png.save(os.path.join(oriented, f"p{o}.png"), exif=exif.tobytes())

    class Flat(torch.nn.Module):
        def forward(self, x):
            return x.flatten(1)

    torch.jit.trace(Flat(), torch.zeros(2, 3, 4, 4)).save(os.path.join(root, "flat.pt"))


def compare(folder, cache, config):
    tfs, mode, exif, (mean, std) = CONFIGS[config]
    tf = T.Compose(tfs)

    def load(path):
        with open(path, "rb") as f:
            img = Image.open(f)
            if config == "draft":
                return draft_resize(img)
            img.load()
        if exif:
            img = ImageOps.exif_transpose(img)
        return img.convert(mode)

    ds = datasets.ImageFolder(folder, transform=tf, loader=load)
    ref = np.stack([ds[i][0].numpy() for i in range(len(ds))])
    with h5py.File(cache, "r") as f:
        got = f["embeddings/flat"][:].reshape(ref.shape)
        keys = [k.decode() for k in f["keys"][:]]
        labels = f["labels"][:].tolist()
        names = json.loads(f["labels"].attrs["label_names"])
    same_order = keys == [os.path.relpath(p, folder) for p, _ in ds.samples] and labels == ds.targets
    # Differences in [0, 1] units: undo the normalisation's division by std.
    scale = np.asarray(std, np.float64).reshape(1, -1, 1, 1)
    d = np.abs(got.astype(np.float64) - ref) * scale
    deep = np.array(["png16" in k for k in keys])
    within = (d <= 1 / 255 + 1e-6).mean()
    exact8 = float(d[~deep].max()) if (~deep).any() else 0.0
    print(f"{config} rows {len(ds)} order {same_order} classes {names == ds.classes} "
          f"within {within:.6f} mad {d.mean():.6f} max8 {exact8:.2e} maxall {d.max():.5f}")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        if not os.path.exists(sys.argv[2]):
            tmp = tempfile.mkdtemp(prefix=".images-", dir=os.path.dirname(os.path.abspath(sys.argv[2])))
            make(tmp)
            os.rename(tmp, sys.argv[2])
    else:
        for i in range(2, len(sys.argv), 3):
            compare(*sys.argv[i:i + 3])
