"""ResNet-18, ResNet-50 (torchvision's v1.5 layout: the stride sits on the 3x3 convolution) and
ResNeXt-50 32x4d (Xie et al. 2017: the bottleneck's 3x3 convolution in 32 groups of 4 base
channels)."""
from __future__ import annotations

from torch import nn


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1,
             groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout)]


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(*_conv_bn(cin, width, 3, stride), nn.ReLU(inplace=True),
                                  *_conv_bn(width, cout, 3))
        self.shortcut = (nn.Sequential(*_conv_bn(cin, cout, 1, stride))
                         if stride != 1 or cin != cout else nn.Identity())
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1, groups: int = 1,
                 group_width: int = 64):
        super().__init__()
        cout = width * self.expansion
        inner = width * group_width // 64 * groups  # ResNeXt's cardinality x bottleneck width
        self.body = nn.Sequential(*_conv_bn(cin, inner, 1), nn.ReLU(inplace=True),
                                  *_conv_bn(inner, inner, 3, stride, groups),
                                  nn.ReLU(inplace=True), *_conv_bn(inner, cout, 1))
        self.shortcut = (nn.Sequential(*_conv_bn(cin, cout, 1, stride))
                         if stride != 1 or cin != cout else nn.Identity())
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    """Stem (7x7/2 conv, 3x3/2 max-pool), four stages, global average pool, classifier."""

    def __init__(self, block: type, layers: tuple[int, ...], num_classes: int = 1000,
                 **block_args):
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, 64, 7, 2), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        stages, cin = [], 64
        for i, count in enumerate(layers):
            width = 64 * 2 ** i
            for j in range(count):
                stages.append(block(cin, width, 2 if j == 0 and i > 0 else 1, **block_args))
                cin = width * block.expansion
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        return self.fc(self.pool(self.stages(self.stem(x))).flatten(1))


def resnet18(num_classes: int = 1000) -> ResNet:
    return ResNet(BasicBlock, (2, 2, 2, 2), num_classes)


def resnet50(num_classes: int = 1000) -> ResNet:
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes)


def resnext50_32x4d(num_classes: int = 1000) -> ResNet:
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes, groups=32, group_width=4)
