"""gpu-check's references: the PyTorch pipelines cache-fill is measured beside (torchvision's
DataLoader, an nvJPEG loop, the forward alone), and reading what they and cache-fill wrote."""
import subprocess
import time


def torchvision_loader(imgs, workers, batch, subset=None):
    import torch
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    ds = ImageFolder(imgs, T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                                      T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
    if subset is not None:
        ds = torch.utils.data.Subset(ds, range(subset))
    return torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=False, num_workers=workers, pin_memory=True)


def reference_embeddings(imgs, model, rows, tf32):
    """PyTorch's embeddings of the first `rows` images (eager TorchScript module, as loaded)."""
    import torch
    torch.backends.cudnn.allow_tf32 = tf32
    m = torch.jit.load(model, map_location="cuda:0").eval()
    out = []
    with torch.no_grad():
        for x, _ in torchvision_loader(imgs, 8, 256, rows):
            out.append(m(x.cuda()).float().cpu())
    torch.backends.cudnn.allow_tf32 = True
    return torch.cat(out)


def compare(a, b):
    import torch
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    cos = torch.nn.functional.cosine_similarity(a, b, dim=1)
    return {"min_cosine": round(cos.min().item(), 8), "max_abs_diff": float((a - b).abs().max()),
            "identical": bool(torch.equal(a, b))}


def embeddings(path, name="resnet50"):
    import h5py
    with h5py.File(path, "r") as f:
        e = f["embeddings/" + name]
        return e[:], dict(e.attrs)


# ---- fill performance (issue #32) ----------------------------------------------------------------
def forward_ceiling(model, batch=256, iters=30, precision="fp32"):
    """The frozen, optimised module's forward alone on GPU-resident batches (rows/s), under autocast
    in bfloat16 for bf16 (as cache-fill --precision bf16 runs it)."""
    import torch
    m = torch.jit.load(model, map_location="cuda:0").eval()
    m = torch.jit.optimize_for_inference(torch.jit.freeze(m))
    x = torch.randn(batch, 3, 224, 224, device="cuda:0")
    with torch.no_grad(), torch.autocast("cuda", torch.bfloat16, enabled=precision == "bf16"):
        for _ in range(5):
            m(x)
        torch.cuda.synchronize()
        t = time.monotonic()
        for _ in range(iters):
            m(x)
        torch.cuda.synchronize()
    return batch * iters / (time.monotonic() - t)


def torchvision_pipeline(imgs, model, out, workers, precision="fp32"):
    """ImageFolder + DataLoader(pin_memory) + the module under no_grad (and autocast for bf16), into
    an HDF5 file: rows/s from building the DataLoader to closing the file (the module loaded before)."""
    import h5py
    import torch
    m = torch.jit.load(model, map_location="cuda:0").eval()
    t = time.monotonic()
    loader = torchvision_loader(imgs, workers, 256)
    n = len(loader.dataset)
    with h5py.File(out, "w") as f, torch.no_grad(), \
            torch.autocast("cuda", torch.bfloat16, enabled=precision == "bf16"):
        d = None
        at = 0
        for x, _ in loader:
            e = m(x.cuda(non_blocking=True)).float().cpu().numpy()
            if d is None:
                d = f.create_dataset("embeddings/resnet50", (n, e.shape[1]), "f4")
            d[at:at + len(e)] = e
            at += len(e)
    return n / (time.monotonic() - t)


def nvjpeg_pipeline(imgs, model, out, workers, batch=256, resize=False, precision="fp32"):
    """The GPU-decoding pipeline a PyTorch user would write: JPEG bytes read by `workers` threads one
    batch ahead, decoded on the GPU by nvJPEG (torchvision.io.decode_jpeg, batched, as RGB), cropped and
    normalised there, the module under no_grad (and autocast for bf16), into an HDF5 file: rows/s
    from the first read to closing the file (the module loaded before). With resize, each image's
    shorter side goes to 256 on the GPU first (antialiased bilinear, as T.Resize(256)); the 20,000
    image workload is 256x256, where only the 224 crop remains."""
    from concurrent.futures import ThreadPoolExecutor
    import h5py
    import torch
    import torchvision.io as tio
    import torchvision.transforms.functional as TF
    from torchvision.datasets import ImageFolder
    files = [p for p, _ in ImageFolder(imgs).samples]
    n = len(files)
    m = torch.jit.load(model, map_location="cuda:0").eval()
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda:0").view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device="cuda:0").view(1, 3, 1, 1)
    starts = list(range(0, n, batch))
    t = time.monotonic()
    with ThreadPoolExecutor(workers) as pool, h5py.File(out, "w") as f, torch.no_grad(), \
            torch.autocast("cuda", torch.bfloat16, enabled=precision == "bf16"):
        def submit(a):
            return [pool.submit(tio.read_file, files[i]) for i in range(a, min(a + batch, n))]
        d = f.create_dataset("embeddings/resnet50", (n, 2048), "f4")
        ahead = submit(0)
        for k, a in enumerate(starts):
            data = [fu.result() for fu in ahead]
            if k + 1 < len(starts):
                ahead = submit(starts[k + 1])
            decoded = tio.decode_jpeg(data, mode=tio.ImageReadMode.RGB, device="cuda:0")
            if resize:
                decoded = [TF.center_crop(TF.resize(x, 256, antialias=True), 224) for x in decoded]
            x = torch.stack(decoded)
            top = (x.shape[2] - 224) // 2
            left = (x.shape[3] - 224) // 2
            x = x[:, :, top:top + 224, left:left + 224].float().div_(255).sub_(mean).div_(std)
            e = m(x).float().cpu().numpy()
            d[a:a + len(e)] = e
    return n / (time.monotonic() - t)


# ---- gc-train on the GPU ------------------------------------------------------------------------
def gpu_memory_sampler(stop, peak):
    while not stop.is_set():
        p = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True)
        try:
            peak[0] = max(peak[0], int(p.stdout.split()[0]))
        except (ValueError, IndexError):
            pass
        stop.wait(0.1)


def stage_seconds(b):
    """A bottleneck report's busy seconds by stage, and its loop's (for the log)."""
    out = {s["name"]: round(s["busy_seconds"], 2) for s in b.get("stages", []) if s["busy_seconds"] > 0}
    out["loop"] = round(b.get("loop_seconds", 0), 2)
    return out
