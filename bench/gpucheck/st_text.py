#!/usr/bin/env python3
"""gpu-check's text stage, the Python side (run as a subprocess, one clean process each):

  st_text.py model SRC_DIR DST_DIR        a sentence-transformers folder at DST_DIR: SRC_DIR's files,
                                          with its weights where it has them, else weights drawn at
                                          random (seed 0) for its config (what a forward costs does
                                          not depend on the values); prints {"weights": "trained"|"random"}
  st_text.py export MODEL_DIR OUT DEVICE  the model traced on DEVICE with PyTorch's fused attention
                                          (sdpa), mean pooling and L2 normalisation (docs/models.md's
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
    from torch import nn

    class Pooled(nn.Module):
        def __init__(self, transformer):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask, token_type_ids):
            states = self.transformer(input_ids=input_ids, attention_mask=attention_mask,
                                      token_type_ids=token_type_ids)[0]
            mask = attention_mask.unsqueeze(-1).to(states.dtype)
            return nn.functional.normalize((states * mask).sum(1) / mask.sum(1).clamp(min=1e-9), p=2.0, dim=1)

    return Pooled(transformer).eval()


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
