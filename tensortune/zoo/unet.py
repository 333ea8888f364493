"""U-Net (Ronneberger et al. 2015) as it is usually run today: 'same'-padded 3x3 convolutions
with batch norm, four 2x2 max-pool downsamplings, 2x2 stride-2 transposed convolutions up,
skip connections concatenated, a 1x1 convolution to the class maps.

``base`` is the first level's width (the paper's is 64, doubled at every level); the zoo's
``unet`` uses 32, a common lighter setting, at 256x256 by default.
"""
from __future__ import annotations

import torch
from torch import nn


def double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, base: int = 64, levels: int = 4, in_channels: int = 3,
                 num_classes: int = 2):
        super().__init__()
        widths = [base * 2 ** i for i in range(levels + 1)]
        self.inc = double_conv(in_channels, widths[0])
        self.downs = nn.ModuleList(double_conv(a, b) for a, b in zip(widths, widths[1:]))
        self.pool = nn.MaxPool2d(2)
        self.ups = nn.ModuleList(nn.ConvTranspose2d(b, a, 2, 2)
                                 for a, b in zip(widths[::-1][1:], widths[::-1]))
        self.decs = nn.ModuleList(double_conv(2 * a, a) for a in widths[::-1][1:])
        self.out = nn.Conv2d(widths[0], num_classes, 1)

    def forward(self, x):
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(self.pool(skips[-1])))
        x = skips.pop()
        for up, dec in zip(self.ups, self.decs):
            x = dec(torch.cat((skips.pop(), up(x)), 1))
        return self.out(x)


def unet(base: int = 32, num_classes: int = 2) -> UNet:
    return UNet(base, 4, 3, num_classes)
