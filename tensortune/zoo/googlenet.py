"""GoogLeNet (Inception v1, no auxiliary heads) with batch-norm, after torchvision.

The third branch keeps the paper's 5x5 convolution (torchvision uses 3x3 there).
"""
from __future__ import annotations

import torch
from torch import nn

# in channels, then per module: 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection
INCEPTION = {
    "3a": (192, 64, 96, 128, 16, 32, 32), "3b": (256, 128, 128, 192, 32, 96, 64),
    "4a": (480, 192, 96, 208, 16, 48, 64), "4b": (512, 160, 112, 224, 24, 64, 64),
    "4c": (512, 128, 128, 256, 24, 64, 64), "4d": (512, 112, 144, 288, 32, 64, 64),
    "4e": (528, 256, 160, 320, 32, 128, 128), "5a": (832, 256, 160, 320, 32, 128, 128),
    "5b": (832, 384, 192, 384, 48, 128, 128)}


def _conv_bn_relu(cin: int, cout: int, kernel: int, stride: int = 1) -> nn.Sequential:
    conv = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False)
    return nn.Sequential(conv, nn.BatchNorm2d(cout, eps=0.001), nn.ReLU(inplace=True))


class Inception(nn.Module):
    def __init__(self, cin: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, pool: int):
        super().__init__()
        self.branch1 = _conv_bn_relu(cin, c1, 1)
        self.branch2 = nn.Sequential(_conv_bn_relu(cin, c3r, 1), _conv_bn_relu(c3r, c3, 3))
        self.branch3 = nn.Sequential(_conv_bn_relu(cin, c5r, 1), _conv_bn_relu(c5r, c5, 5))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, 1, 1), _conv_bn_relu(cin, pool, 1))

    def forward(self, x):
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class GoogLeNet(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        m = {name: Inception(*spec) for name, spec in INCEPTION.items()}
        self.features = nn.Sequential(
            _conv_bn_relu(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1),
            _conv_bn_relu(64, 64, 1), _conv_bn_relu(64, 192, 3), nn.MaxPool2d(3, 2, 1),
            m["3a"], m["3b"], nn.MaxPool2d(3, 2, 1),
            m["4a"], m["4b"], m["4c"], m["4d"], m["4e"], nn.MaxPool2d(2, 2),
            m["5a"], m["5b"])
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1024, num_classes))

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


def googlenet(num_classes: int = 1000) -> GoogLeNet:
    return GoogLeNet(num_classes)
