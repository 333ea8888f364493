"""GPT-2 small (Radford et al. 2019; Hugging Face's layout): token and position embeddings, 12
pre-norm decoder layers with causal self-attention and a tanh-approximated GELU MLP, a final
LayerNorm and the language-model head tied to the token embedding.

The model takes token ids (int64, ``[batch, seq_len]``, positions ``0..seq_len-1``) and
returns the next-token logits of the last position, ``[batch, vocab]``: the prefill step of
generation (all positions' logits would be a 50257-wide matmul per token, which generation
does not use). The causal mask is a constant buffer, applied as Hugging Face does: scores
outside it replaced by the most negative float32 before the softmax.
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class GPT2Config:
    vocab: int = 50257
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    max_positions: int = 1024
    eps: float = 1e-5

    def __post_init__(self):
        if self.hidden % self.heads:
            raise ValueError(f"hidden size {self.hidden} is not a multiple of {self.heads} heads")


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)
        n = cfg.max_positions
        self.register_buffer("causal", torch.tril(torch.ones(n, n, dtype=torch.bool))[None, None],
                             persistent=False)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = (t.reshape(b, s, self.heads, h // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(h, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(h // self.heads)
        scores = torch.where(self.causal[:, :, :s, :s], scores,
                             torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype))
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(context.transpose(1, 2).reshape(b, s, h))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.attn = CausalSelfAttention(cfg)
        self.norm2 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden, 4 * cfg.hidden),
                                 nn.GELU(approximate="tanh"), nn.Linear(4 * cfg.hidden, cfg.hidden))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT2Model(nn.Module):
    def __init__(self, cfg: GPT2Config = GPT2Config()):
        super().__init__()
        self.cfg = cfg
        self.word = nn.Embedding(cfg.vocab, cfg.hidden)
        self.position = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.lm_head.weight = self.word.weight  # tied, as in GPT-2
        self.register_buffer("position_ids", torch.arange(cfg.max_positions)[None],
                             persistent=False)

    def forward(self, token_ids):
        x = self.word(token_ids) + self.position(self.position_ids[:, :token_ids.shape[1]])
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x[:, -1]))


def gpt2_small(cfg: GPT2Config = GPT2Config()) -> GPT2Model:
    return GPT2Model(cfg)
