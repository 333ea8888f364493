"""DeiT-S (Touvron et al. 2021: ViT-S/16 without the distillation token; timm's
``deit_small_patch16_224``): a 16x16 patch-embedding convolution, a class token, learned
positions, 12 pre-norm encoder layers (6 heads, GELU MLP), a final LayerNorm and a classifier
on the class token. Attention is written as explicit matmuls and a softmax, as in ``bert``."""
from __future__ import annotations

import math

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(),
                                 nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, image_size: int = 224, patch: int = 16, dim: int = 384, depth: int = 12,
                 heads: int = 6, num_classes: int = 1000):
        super().__init__()
        self.patch = patch
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        # one position per patch of a square image of ``image_size`` (fixed at construction)
        self.pos_embed = nn.Parameter(torch.randn(1, (image_size // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*(EncoderBlock(dim, heads) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        if x.shape[1] + 1 != self.pos_embed.shape[1]:
            raise ValueError(f"{x.shape[1]} patches, but the model has positions for "
                             f"{self.pos_embed.shape[1] - 1}: build it for this image size")
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def deit_small(num_classes: int = 1000, image_size: int = 224, depth: int = 12):
    return VisionTransformer(image_size, 16, 384, depth, 6, num_classes)
