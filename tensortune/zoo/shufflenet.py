"""ShuffleNet V2 (width 1.0, as in torchvision): channel split, a 1x1 - 3x3 depthwise - 1x1
branch, concatenation and channel shuffle. Its channel counts (24, 58, 116, 232, 464) are the
irregular ones no other zoo model has, and no shipped cost model was trained on it."""
from __future__ import annotations

import torch
from torch import nn

STAGE_REPEATS = (4, 8, 4)
STAGE_CHANNELS = (24, 116, 232, 464, 1024)


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
             relu: bool = True) -> list[nn.Module]:
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    return layers + [nn.ReLU(inplace=True)] if relu else layers


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    b, c, h, w = x.shape
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).reshape(b, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride > 1:  # the downsampling unit: both halves see the whole input
            self.left = nn.Sequential(*_conv_bn(cin, cin, 3, stride, groups=cin, relu=False),
                                      *_conv_bn(cin, half, 1))
        branch_in = cin if stride > 1 else half
        self.right = nn.Sequential(*_conv_bn(branch_in, half, 1),
                                   *_conv_bn(half, half, 3, stride, groups=half, relu=False),
                                   *_conv_bn(half, half, 1))

    def forward(self, x):
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat((a, self.right(b)), dim=1)
        else:
            out = torch.cat((self.left(x), self.right(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        cin = STAGE_CHANNELS[0]
        self.stem = nn.Sequential(*_conv_bn(3, cin, 3, 2), nn.MaxPool2d(3, 2, 1))
        units = []
        for repeats, cout in zip(STAGE_REPEATS, STAGE_CHANNELS[1:4]):
            units += [ShuffleUnit(cin, cout, 2)] + [ShuffleUnit(cout, cout, 1)
                                                     for _ in range(repeats - 1)]
            cin = cout
        self.units = nn.Sequential(*units)
        self.head = nn.Sequential(*_conv_bn(cin, STAGE_CHANNELS[-1], 1))
        self.fc = nn.Linear(STAGE_CHANNELS[-1], num_classes)

    def forward(self, x):
        x = self.head(self.units(self.stem(x)))
        return self.fc(x.mean((2, 3)))


def shufflenet_v2() -> ShuffleNetV2:
    return ShuffleNetV2()
