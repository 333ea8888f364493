"""BERT-base (uncased layout): embeddings, 12 post-norm encoder layers, pooler.

The model takes token ids (int64, ``[batch, seq_len]``; token type 0 and positions
``0..seq_len-1`` implied, no padding mask) and returns ``(sequence_output, pooled_output)``:
``[batch, seq_len, hidden]`` and ``[batch, hidden]``. Attention is written with explicit
matmuls and a softmax, so it imports as batched matmuls that the tuner can work on.
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class BertConfig:
    vocab: int = 30522
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    intermediate: int = 3072
    max_positions: int = 512
    type_vocab: int = 2
    eps: float = 1e-12

    def __post_init__(self):
        if self.hidden % self.heads:
            raise ValueError(f"hidden size {self.hidden} is not a multiple of {self.heads} heads")


class SelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.heads = cfg.heads
        self.query = nn.Linear(cfg.hidden, cfg.hidden)
        self.key = nn.Linear(cfg.hidden, cfg.hidden)
        self.value = nn.Linear(cfg.hidden, cfg.hidden)
        self.output = nn.Linear(cfg.hidden, cfg.hidden)
        self.norm = nn.LayerNorm(cfg.hidden, eps=cfg.eps)

    def _split(self, x):
        b, s, h = x.shape
        return x.reshape(b, s, self.heads, h // self.heads).transpose(1, 2)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(h // self.heads)
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        context = context.transpose(1, 2).reshape(b, s, h)
        return self.norm(x + self.output(context))


class EncoderLayer(nn.Module):
    """Self-attention then a GELU feed-forward block, each with residual and LayerNorm."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attention = SelfAttention(cfg)
        self.up = nn.Linear(cfg.hidden, cfg.intermediate)
        self.down = nn.Linear(cfg.intermediate, cfg.hidden)
        self.norm = nn.LayerNorm(cfg.hidden, eps=cfg.eps)

    def forward(self, x):
        x = self.attention(x)
        return self.norm(x + self.down(nn.functional.gelu(self.up(x))))


class BertModel(nn.Module):
    def __init__(self, cfg: BertConfig = BertConfig()):
        super().__init__()
        self.cfg = cfg
        self.word = nn.Embedding(cfg.vocab, cfg.hidden)
        self.position = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.token_type = nn.Embedding(cfg.type_vocab, cfg.hidden)
        self.embed_norm = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.layers))
        self.pooler = nn.Linear(cfg.hidden, cfg.hidden)
        self.register_buffer("position_ids", torch.arange(cfg.max_positions)[None],
                             persistent=False)

    def forward(self, token_ids):
        seq_len = token_ids.shape[1]
        x = (self.word(token_ids) + self.position(self.position_ids[:, :seq_len])
             + self.token_type(torch.zeros_like(token_ids)))
        x = self.embed_norm(x)
        for layer in self.layers:
            x = layer(x)
        return x, torch.tanh(self.pooler(x[:, 0]))


def bert_base(cfg: BertConfig = BertConfig()) -> BertModel:
    return BertModel(cfg)
