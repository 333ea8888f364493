"""RegNetY-400MF (Radosavovic et al. 2020; torchvision's layout): a stem, four stages of
residual bottlenecks whose 3x3 convolutions are grouped (group width 8) with
squeeze-and-excitation, widths from the paper's quantized linear rule."""
from __future__ import annotations

import math

from torch import nn

from .efficientnet import SqueezeExcitation, conv_bn_act
from .mobilenet_v3 import make_divisible


def stage_params(depth: int, w_0: int, w_a: float, w_m: float, group_width: int,
                 quant: int = 8) -> list[tuple[int, int, int]]:
    """``(width, depth, group width)`` per stage: block ``j`` has width ``w_0 + w_a * j``,
    rounded to ``w_0 * w_m ** k`` and to a multiple of ``quant``; equal widths form a stage."""
    widths = []
    for j in range(depth):
        k = round(math.log((w_0 + w_a * j) / w_0) / math.log(w_m))
        widths.append(int(round(w_0 * w_m ** k / quant) * quant))
    stages: list[list[int]] = []
    for w in widths:
        if stages and stages[-1][0] == w:
            stages[-1][1] += 1
        else:
            stages.append([w, 1])
    out = []
    for w, d in stages:
        g = min(group_width, w)
        out.append((make_divisible(w, g), d, g))  # a width the groups divide
    return out


class YBlock(nn.Module):
    """1x1, grouped 3x3 (stride here), squeeze-and-excitation, 1x1; a projected shortcut."""

    def __init__(self, cin: int, cout: int, stride: int, group_width: int, se_ratio: float):
        super().__init__()
        self.body = nn.Sequential(
            conv_bn_act(cin, cout, 1, act=nn.ReLU, eps=1e-5),
            conv_bn_act(cout, cout, 3, stride, groups=cout // group_width, act=nn.ReLU, eps=1e-5),
            SqueezeExcitation(cout, int(round(se_ratio * cin)), nn.ReLU),
            conv_bn_act(cout, cout, 1, act=None, eps=1e-5))
        self.shortcut = (conv_bn_act(cin, cout, 1, stride, act=None, eps=1e-5)
                         if cin != cout or stride != 1 else nn.Identity())
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.shortcut(x) + self.body(x))


class RegNet(nn.Module):
    def __init__(self, stages, se_ratio: float = 0.25, stem: int = 32, num_classes: int = 1000):
        super().__init__()
        blocks, cin = [], stem
        for width, depth, group in stages:
            for i in range(depth):
                blocks.append(YBlock(cin, width, 2 if i == 0 else 1, group, se_ratio))
                cin = width
        self.stem = conv_bn_act(3, stem, 3, 2, act=nn.ReLU, eps=1e-5)
        self.trunk = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        return self.fc(self.pool(self.trunk(self.stem(x))).flatten(1))


def regnet_y_400mf(num_classes: int = 1000) -> RegNet:
    # the paper's RegNetY-400MF: d=16, w_0=48, w_a=27.89, w_m=2.09, g=8, SE ratio 0.25
    return RegNet(stage_params(16, 48, 27.89, 2.09, 8), 0.25, 32, num_classes)
