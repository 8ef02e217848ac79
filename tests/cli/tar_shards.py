#!/usr/bin/env python3
"""WebDataset tar shards for tests/cli/inputs_tar_*.test.sh and cache_fill_update.test.sh (made once
by the fixtures.tar test, copied by each script), written with Python's tarfile (nothing of
traincache's), from image folders this script also writes:

  tar_shards.py make WORK    writes, under WORK:
    folder/{cat,dog}/NAME.png   40 PNG images (20 per class, 20..43 pixels wide, RGB and grey)
    shards/000{0..3}.tar        the folder in its order, 10 samples each: KEY.png, KEY.cls (the
                                class index), KEY.txt (a caption), KEY.json ({"label", "caption"})
    all.tar.gz                  the four shards' samples in one gzip-compressed tar
    pairs.jsonl                 the same samples as a manifest: {"png": path, "txt": caption}
    big/0000{0..5}.tar          1,200 grey 28x28 PNG samples (200 per shard) with .cls
    bad/*.tar                   shards that must be refused (see BAD below)
    mixed.tar                   two samples, one with KEY.png, the other with KEY.jpg
    texts.tar                   two captions (KEY.txt), one sample with an image too
"""
import io
import json
import os
import random
import sys
import tarfile

from PIL import Image


def png_bytes(img):
    b = io.BytesIO()
    img.save(b, format="PNG")
    return b.getvalue()


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def sample_members(key, png, cls, caption):
    return [(key + ".png", png), (key + ".cls", str(cls).encode()), (key + ".txt", caption.encode()),
            (key + ".json", json.dumps({"label": cls, "caption": caption}).encode())]


def make(work):
    rng = random.Random(5)
    samples = []  # (key, png bytes, class, caption) in the folder's order (ImageFolder: sorted)
    for cls, name in enumerate(["cat", "dog"]):
        os.makedirs(os.path.join(work, "folder", name), exist_ok=True)
        for i in range(20):
            w, h = 20 + i + cls * 4, 24 + (i * 7) % 11
            img = Image.new("RGB" if i % 3 else "L", (w, h))
            img.putdata([tuple(rng.randrange(256) for _ in range(3)) if img.mode == "RGB" else rng.randrange(256)
                         for _ in range(w * h)])
            key = f"{name}{i:02d}"
            data = png_bytes(img)
            with open(os.path.join(work, "folder", name, key + ".png"), "wb") as f:
                f.write(data)
            samples.append((key, data, cls, f"a photo of {name} number {i}"))
    os.makedirs(os.path.join(work, "shards"), exist_ok=True)
    for s in range(4):
        with tarfile.open(os.path.join(work, "shards", f"{s:04d}.tar"), "w") as t:
            for key, data, cls, caption in samples[s * 10:(s + 1) * 10]:
                for name, b in sample_members(key, data, cls, caption):
                    add(t, name, b)
    with tarfile.open(os.path.join(work, "all.tar.gz"), "w:gz") as t:
        for key, data, cls, caption in samples:
            for name, b in sample_members(key, data, cls, caption):
                add(t, name, b)
    with open(os.path.join(work, "pairs.jsonl"), "w") as f:
        for key, data, cls, caption in samples:
            f.write(json.dumps({"png": os.path.join("folder", ["cat", "dog"][cls], key + ".png"), "txt": caption}) + "\n")

    os.makedirs(os.path.join(work, "big"), exist_ok=True)
    for s in range(6):
        with tarfile.open(os.path.join(work, "big", f"{s:05d}.tar"), "w") as t:
            for i in range(200):
                img = Image.new("L", (28, 28))
                img.putdata([rng.randrange(256) for _ in range(28 * 28)])
                key = f"s{s}_{i:03d}"
                add(t, key + ".png", png_bytes(img))
                add(t, key + ".cls", str(i % 10).encode())

    bad = os.path.join(work, "bad")
    os.makedirs(bad, exist_ok=True)
    png = samples[0][1]

    def shard(name, members):
        with tarfile.open(os.path.join(bad, name), "w") as t:
            for m, b in members:
                add(t, m, b)

    shard("traversal.tar", [("a.png", png), ("a.cls", b"0"), ("../b.png", png), ("../b.cls", b"1")])
    shard("absolute.tar", [("/abs/a.png", png), ("/abs/a.cls", b"0")])
    shard("apart.tar", [("a.png", png), ("b.png", png), ("a.cls", b"0")])  # key a twice, apart
    shard("twice.tar", [("a.png", png), ("a.png", png)])
    shard("cat00.tar", [("cat00.png", png), ("cat00.cls", b"0")])  # a key of shards/0000.tar again
    shard("oddities.tar", [("a.png", png), ("a.json", b'{"label": 1.5}'), ("a.txt", b"caf\xe9"),
                           ("b.png", png), ("b.json", b'{"label": 2}'), ("b.txt", b"ok")])
    shard("empty.tar", [("README", b"no samples here\n")])
    shard("notobject.tar", [("a.png", png), ("a.json", b"[1]")])
    shard("nocls.tar", [("a.png", png), ("a.cls", b"0"), ("b.png", png), ("c.png", png), ("c.cls", b"1")])
    with open(os.path.join(work, "shards", "0000.tar"), "rb") as f:
        whole = f.read()
    with open(os.path.join(bad, "truncated.tar"), "wb") as f:
        f.write(whole[:len(whole) // 2 + 100])  # ends inside a member
    # A member whose header claims more bytes than the archive holds (a valid header otherwise).
    header = bytearray(whole[:512])
    header[124:136] = b"%011o\0" % (len(whole) * 4)
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    with open(os.path.join(bad, "oversized.tar"), "wb") as f:
        f.write(bytes(header) + whole[512:])
    with open(os.path.join(bad, "nottar.tar"), "wb") as f:
        f.write(b"this is not a tar file\n" * 40)
    # Cut at a member boundary (an interrupted copy): every member whole, no end-of-archive blocks.
    with tarfile.open(os.path.join(work, "shards", "0000.tar")) as t:
        members = t.getmembers()
    end = members[5].offset_data + (members[5].size + 511) // 512 * 512
    with open(os.path.join(bad, "cut.tar"), "wb") as f:
        f.write(whole[:end])
    shard("bigtext.tar", [("a.png", png), ("a.txt", b"x" * (17 << 20))])  # a caption of 17 MiB

    # Samples with a PNG or a JPEG image (shards made from mixed folders): KEY.png or KEY.jpg.
    jpeg = io.BytesIO()
    Image.open(io.BytesIO(samples[1][1])).convert("RGB").save(jpeg, format="JPEG", quality=95)
    # Captions, one of them with an image: a text fill reads both samples.
    with tarfile.open(os.path.join(work, "texts.tar"), "w") as t:
        add(t, "t0.png", samples[0][1])
        add(t, "t0.txt", b"a photo of a cat")
        add(t, "t1.txt", b"a photo of a dog")
    with tarfile.open(os.path.join(work, "mixed.tar"), "w") as t:
        add(t, "m0.png", samples[0][1])
        add(t, "m0.cls", b"0")
        add(t, "m1.jpg", jpeg.getvalue())
        add(t, "m1.cls", b"1")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "make":
        sys.exit("usage: tar_shards.py make WORK")
    make(sys.argv[2])
