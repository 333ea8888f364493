"""DenseNet-121 (growth rate 32, blocks of 6/12/24/16 layers, bottleneck width 4x), after
torchvision: every layer is batch-norm, ReLU, then a convolution (pre-activation), and a
block's layers see the concatenation of all earlier outputs."""
from __future__ import annotations

import torch
from torch import nn

GROWTH, BOTTLENECK, STEM = 32, 4, 64
BLOCKS = (6, 12, 24, 16)


def _norm_relu_conv(cin: int, cout: int, kernel: int) -> nn.Sequential:
    return nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(inplace=True),
                         nn.Conv2d(cin, cout, kernel, 1, kernel // 2, bias=False))


class DenseLayer(nn.Module):
    def __init__(self, cin: int):
        super().__init__()
        self.bottleneck = _norm_relu_conv(cin, BOTTLENECK * GROWTH, 1)
        self.conv = _norm_relu_conv(BOTTLENECK * GROWTH, GROWTH, 3)

    def forward(self, x):
        return torch.cat([x, self.conv(self.bottleneck(x))], 1)


class DenseNet121(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, STEM, 7, 2, 3, bias=False), nn.BatchNorm2d(STEM),
                                   nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
        channels = STEM
        for i, depth in enumerate(BLOCKS):
            for _ in range(depth):
                layers.append(DenseLayer(channels))
                channels += GROWTH
            if i < len(BLOCKS) - 1:  # a transition halves channels and resolution
                layers += [_norm_relu_conv(channels, channels // 2, 1), nn.AvgPool2d(2, 2)]
                channels //= 2
        layers += [nn.BatchNorm2d(channels), nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(channels, num_classes)

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


def densenet121(num_classes: int = 1000) -> DenseNet121:
    return DenseNet121(num_classes)
