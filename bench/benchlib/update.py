"""make bench: cache-fill --update when the data grows."""
import json
import os
import shutil
import subprocess
import sys
import time

from benchlib.common import ROOT, log

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from traincache_caches import update_differences  # noqa: E402 (after its folder is on the path)


def grown_folder(folder, work, name, files, seed, new, changed=10, removed=10):
    """Two states of an image folder made of `files` (paths relative to `folder`, hard links): the
    old one lacks `new` of them, drawn at random from every class; the new one has them all
    but `removed`, and `changed` old files rewritten with another file's bytes. Returns (path, make
    the old state, make the new state)."""
    import random
    rng = random.Random(seed)
    path = os.path.join(work, name)
    late = set(rng.sample(files, new))
    early = [f for f in files if f not in late]
    gone = set(rng.sample(early, removed))
    rewritten = rng.sample([f for f in early if f not in gone], changed)

    def make(names, rewrite=()):
        subprocess.check_call(["rm", "-rf", path])
        for n in names:
            os.makedirs(os.path.dirname(os.path.join(path, n)), exist_ok=True)
            if n in rewrite:  # another file's bytes under this name
                shutil.copyfile(os.path.join(folder, files[(files.index(n) + 1) % len(files)]), os.path.join(path, n))
            else:
                os.link(os.path.join(folder, n), os.path.join(path, n))

    return path, lambda: make(early), lambda: make([f for f in files if f not in gone], set(rewritten))


def update_case(fill, work, name, states):
    """One update benchmark: a cache of the old state, then the new state filled in full and updated
    from it, side by side, then updated once more with nothing changed. The updated rows must match
    the full fill's: labels and keys exactly, embeddings within what the update allows."""
    import h5py
    import numpy as np
    path, old, new = states
    cache, full = os.path.join(work, name + "-updated.h5"), os.path.join(work, name + "-full.h5")

    def timed(cmd):
        start = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"run-bench: cache-fill failed: {p.stderr}")
        return time.perf_counter() - start, json.loads(p.stdout)

    old()
    timed(fill + ["--input", path, "--out", cache, "--force"])
    new()
    full_s, full_r = timed(fill + ["--input", path, "--out", full, "--force"])
    upd_s, upd_r = timed(fill + ["--input", path, "--out", cache, "--update"])
    same_s, same_r = timed(fill + ["--input", path, "--out", cache, "--update"])
    with h5py.File(cache, "r") as a, h5py.File(full, "r") as b:
        exact = all(np.array_equal(a[k][()], b[k][()]) for k in ("labels", "keys", "row_digests"))
    differences = update_differences(cache, full)  # the tests' comparison (tests/cli/update_lib.sh)
    for f in (cache, full):
        os.remove(f)
    subprocess.check_call(["rm", "-rf", path])
    keep = ("digest_seconds", "model_setup_seconds", "encode_seconds", "input_wait_seconds", "publish_seconds")
    return {"rows": full_r["rows"], "update": upd_r["update"], "rows_encoded": upd_r["rows_encoded"],
            "full_seconds": full_r["seconds"], "full_process_seconds": full_s,
            "update_seconds": upd_r["seconds"], "update_process_seconds": upd_s,
            "unchanged_seconds": same_r["seconds"], "unchanged_process_seconds": same_s,
            "update_vs_full": upd_r["seconds"] / full_r["seconds"],
            "unchanged_vs_full": same_r["seconds"] / full_r["seconds"],
            "update_breakdown": {k: upd_r[k] for k in keep}, "full_breakdown": {k: full_r[k] for k in keep},
            "labels_keys_digests_equal": exact,
            "embeddings_max_abs_diff": max(d for d, _, _ in differences.values()),
            "embeddings_within_allowed": all(d <= allows for d, allows, _ in differences.values())}


def update_fill(build, out_dir):
    """cache-fill --update against a full fill of the same new data, side by side (issue #58): 20,000
    JPEGs of which 5% (1,000) arrive later at random places in every class folder, 10 rewritten and
    10 removed; a class folder of 2,000 that gains 15% (300) spread over its 10 classes, 10
    rewritten, 10 removed; and nothing changed. The encoder is resnet18 at 64x64 (a real model's cost on a CPU)."""
    folder = os.path.join(out_dir, "images", "jpeg20k")
    work = os.path.join(out_dir, "update")
    helper = os.path.join(ROOT, "bench", "image-bench")
    resnet = os.path.join(work, "resnet18.pt")
    os.makedirs(work, exist_ok=True)
    if not os.path.exists(resnet):
        subprocess.check_call([helper, "resnet", resnet])
    files = sorted(os.path.relpath(os.path.join(r, f), folder) for r, _, fs in os.walk(folder) for f in fs)
    by_class = {}
    for f in files:
        by_class.setdefault(os.path.dirname(f), []).append(f)
    small = sorted(f for c in sorted(by_class) for f in by_class[c][:230])
    fill = [os.path.join(build, "bin", "cache-fill"), "--encoder", resnet, "--channels", "rgb", "--resize", "64",
            "--workers", "2", "-q", "--json"]
    cases = {"jpeg20k_5pct": update_case(fill, work, "jpeg20k", grown_folder(folder, work, "g20k", files, 1, 1000)),
             "classes2k_15pct": update_case(fill, work, "classes2k",
                                            grown_folder(folder, work, "g2k", small, 2, 300))}
    targets = {"jpeg20k_5pct": 0.10, "classes2k_15pct": 0.25}
    ok = True
    for name, c in cases.items():
        c["target_update_vs_full_max"] = targets[name]
        c["target_unchanged_vs_full_max"] = 0.02
        c["pass"] = (c["update_vs_full"] <= targets[name] and c["unchanged_vs_full"] <= 0.02
                     and c["labels_keys_digests_equal"] and c["embeddings_within_allowed"])
        ok = ok and c["pass"]
        u = c["update"]
        log(f"  {name}: full fill {c['full_seconds']:.2f} s; --update {c['update_seconds']:.2f} s "
            f"(x{c['update_vs_full']:.3f}, target {targets[name]}: {c['rows_encoded']} encoded, {u['rows_copied']} "
            f"copied; added {u['added']}, changed {u['changed']}, removed {u['removed']}); nothing changed "
            f"{c['unchanged_seconds']:.3f} s (x{c['unchanged_vs_full']:.4f}); embeddings within "
            f"{c['embeddings_max_abs_diff']:.3g} of the full fill (expected {u['max_abs_diff_expected']})")
    return {"name": "update", "encoder": "resnet18 (torchvision, random weights, fc = Identity) at 64x64",
            "cases": cases, "pass": ok}
