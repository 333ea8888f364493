"""ConvNeXt-T (Liu et al. 2022; torchvision's layout): a 4x4 patchify stem, blocks of a 7x7
depthwise convolution, LayerNorm over channels (channels-last), a GELU MLP and a layer scale;
LayerNorm and 2x2 stride-2 convolutions between the stages."""
from __future__ import annotations

import torch
from torch import nn


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor (as torchvision: permute, norm, permute)."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int, layer_scale: float = 1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.up = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * dim, dim)
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), layer_scale))

    def forward(self, x):
        y = self.norm(self.dwconv(x).permute(0, 2, 3, 1))
        y = self.down(self.act(self.up(y))).permute(0, 3, 1, 2)
        return x + self.layer_scale * y  # stochastic depth is the identity at inference


class ConvNeXt(nn.Module):
    def __init__(self, depths=(3, 3, 9, 3), dims=(96, 192, 384, 768), num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6)]
        for i, (depth, dim) in enumerate(zip(depths, dims)):
            if i:
                layers += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, 2)]
            layers += [ConvNeXtBlock(dim) for _ in range(depth)]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.norm = LayerNorm2d(dims[-1], eps=1e-6)
        self.fc = nn.Linear(dims[-1], num_classes)

    def forward(self, x):
        return self.fc(self.norm(self.pool(self.features(x))).flatten(1))


def convnext_tiny(num_classes: int = 1000, depths=(3, 3, 9, 3)) -> ConvNeXt:
    return ConvNeXt(depths, (96, 192, 384, 768), num_classes)
