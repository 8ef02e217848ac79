"""Small TorchScript encoders used by the demo and the test fixtures (python3-torch).

Every model is built from a fixed seed, so the exported files are the same on every machine
with the same torch version. They are stand-ins for a real pretrained encoder: frozen, deterministic
(eval mode) and cheap enough for a 2-core CI machine.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ImageCNN(nn.Module):
    """28x28 single-channel images (float32 in [0, 1]) -> `dim`-dimensional embeddings."""

    def __init__(self, dim: int = 64):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc = nn.Linear(64 * 7 * 7, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


class TextEncoder(nn.Module):
    """Token ids [B, T] (int64) and an attention mask [B, T] -> masked-mean-pooled embeddings."""

    def __init__(self, vocab: int = 1000, width: int = 32, dim: int = 16, max_len: int = 64,
                 dropout: float = 0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(max_len, width)
        layer = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=64, dropout=dropout,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
        self.proj = nn.Linear(width, dim)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.size(1), device=input_ids.device).unsqueeze(0)
        h = self.tok(input_ids) + self.pos(positions)
        h = self.encoder(h, src_key_padding_mask=attention_mask == 0)
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        return self.proj(pooled)


class VectorMLP(nn.Module):
    """float32 vectors [B, in_dim] -> [B, out_dim]."""

    def __init__(self, in_dim: int = 16, out_dim: int = 8):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, 32)
        self.fc2 = nn.Linear(32, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def export(module: nn.Module, path: str, seed: int = 0) -> None:
    """Scripts `module` in eval mode and saves it."""
    module.eval()
    torch.jit.script(module).save(path)


def build(cls, seed: int, **kw):
    torch.manual_seed(seed)
    return cls(**kw)
