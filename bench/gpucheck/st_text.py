#!/usr/bin/env python3
"""gpu-check's text stage, the Python side (run as a subprocess, one clean process each):

  st_text.py model SRC_DIR DST_DIR        a sentence-transformers folder at DST_DIR: SRC_DIR's files,
                                          with its weights where it has them, else weights drawn at
                                          random (seed 0) for its config (what a forward costs does
                                          not depend on the values); prints {"weights": "trained"|"random"}
  st_text.py export MODEL_DIR OUT DEVICE  the model traced on DEVICE with PyTorch's fused attention
                                          (sdpa), mean pooling and L2 normalisation (minilm-ref's
                                          wrapper); a trace keeps the device it ran on
  st_text.py encode MODEL_DIR TEXTS.jsonl DEVICE OUT.npy [BATCH:PRECISION ...]
                                          SentenceTransformer.encode on DEVICE, the model loaded and
                                          warmed on 2,000 texts before each clock, once for each
                                          BATCH:PRECISION (fp32, or fp16 by model.half() on CUDA);
                                          saves the first one's embeddings; prints {"BATCH:PRECISION": s}
"""
import json
import os
import shutil
import sys
import time

WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def model(src, dst):
    import torch
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("onnx", "openvino", "*.onnx", "*.h5", "*.msgpack"))
    if any(os.path.exists(os.path.join(dst, w)) for w in WEIGHTS):
        return {"weights": "trained"}
    from transformers import AutoConfig, AutoModel
    torch.manual_seed(0)
    AutoModel.from_config(AutoConfig.from_pretrained(dst)).save_pretrained(dst)
    return {"weights": "random"}


def pooled(transformer):
    """bench/minilm-ref's wrapper: mean pooling over the attention mask, L2 normalisation."""
    import importlib.machinery
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "minilm-ref")
    loader = importlib.machinery.SourceFileLoader("minilm_ref", path)
    ref = importlib.util.module_from_spec(importlib.util.spec_from_loader("minilm_ref", loader))
    loader.exec_module(ref)
    return ref.pooled(transformer)


def export(model_dir, out, device):
    import torch
    from sentence_transformers import SentenceTransformer
    m = SentenceTransformer(model_dir, device=device, model_kwargs={"attn_implementation": "sdpa"})
    ex = m.tokenizer(["an example", "a longer example sentence"], padding=True, return_tensors="pt").to(device)
    with torch.no_grad():
        traced = torch.jit.trace(pooled(m[0].auto_model), (ex["input_ids"], ex["attention_mask"], ex["token_type_ids"]),
                                 strict=False)
    traced.save(out)
    return {}


def encode(model_dir, texts_path, device, out, *runs):
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    texts = [json.loads(line)["text"] for line in open(texts_path, encoding="utf-8")]
    m = SentenceTransformer(model_dir, device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    seconds = {}
    for i, spec in enumerate(runs or ("32:fp32",)):
        batch, precision = spec.split(":")
        m.half() if precision == "fp16" else m.float()
        m.encode(texts[:2000], batch_size=int(batch))
        sync()
        t = time.monotonic()
        emb = m.encode(texts, batch_size=int(batch), convert_to_numpy=True)
        sync()
        seconds[spec] = time.monotonic() - t
        if i == 0:
            np.save(out, emb.astype(np.float32))
    return seconds


if __name__ == "__main__":
    import warnings
    warnings.filterwarnings("ignore")
    commands = {"model": model, "export": export, "encode": encode}
    print(json.dumps(commands[sys.argv[1]](*sys.argv[2:])))
