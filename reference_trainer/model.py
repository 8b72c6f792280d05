"""A small GPT-style decoder that can be cut into pipeline stages.

Blocks live in a ModuleDict keyed by their global index, so a stage keeps the same
parameter names as the whole model, and parts a stage does not own are set to None
(the embedding on later stages, the head on earlier ones).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from reference_trainer.config import ModelConfig


class Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """Pre-norm attention and MLP, each with a residual."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """Token ids (batch, seq) in, logits (batch, seq, vocab) out; a pipeline stage takes
    or returns hidden states (batch, seq, width) where it lacks the embedding or head."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.tok_embed: nn.Embedding | None = nn.Embedding(cfg.vocab, cfg.width)
        self.pos_embed: nn.Embedding | None = nn.Embedding(cfg.seq_len, cfg.width)
        self.layers = nn.ModuleDict({str(i): Block(cfg.width, cfg.heads)
                                     for i in range(cfg.layers)})
        self.norm: nn.LayerNorm | None = nn.LayerNorm(cfg.width)
        self.head: nn.Linear | None = nn.Linear(cfg.width, cfg.vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok_embed is not None:
            positions = torch.arange(x.shape[1], device=x.device)
            x = self.tok_embed(x) + self.pos_embed(positions)
        for block in self.layers.values():
            x = block(x)
        if self.head is not None:
            x = self.head(self.norm(x))
        return x


def build_model(cfg: ModelConfig, seed: int) -> GPT:
    """The same initial weights on every rank and in every mode: the seed alone decides."""
    torch.manual_seed(seed)
    return GPT(cfg)


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def stage_layers(layers: int, stage: int, stages: int) -> range:
    """The block indices of ``stage``: an even split, earlier stages take the remainder."""
    base, extra = divmod(layers, stages)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (1 if stage < extra else 0))


def cut_stage(model: GPT, stage: int, stages: int) -> GPT:
    """Keep only what ``stage`` of ``stages`` runs; the rest is dropped, in place."""
    keep = {str(i) for i in stage_layers(len(model.layers), stage, stages)}
    for name in [n for n in model.layers if n not in keep]:
        del model.layers[name]
    if stage > 0:
        model.tok_embed = model.pos_embed = None
    if stage < stages - 1:
        model.norm = model.head = None
    return model
