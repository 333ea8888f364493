"""EfficientNet-B0 (Tan & Le 2019; torchvision's layout): MBConv blocks with 3x3 and 5x5
depthwise convolutions, squeeze-and-excitation and SiLU. Batch norm eps is 1e-3 as there."""
from __future__ import annotations

from torch import nn

# expansion, kernel, first stride, output channels, repeats (the paper's Table 1, stages 2-8)
B0_STAGES = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
             (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))


def conv_bn_act(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
                act: type | None = nn.SiLU, eps: float = 1e-3) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout, eps=eps)]
    return nn.Sequential(*layers, act(inplace=True)) if act else nn.Sequential(*layers)


class SqueezeExcitation(nn.Module):
    """Global average pool, 1x1 conv down, activation, 1x1 conv up, gate (the channel scale)."""

    def __init__(self, channels: int, squeeze: int, act: type = nn.SiLU,
                 gate: type = nn.Sigmoid):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.act, self.gate = act(inplace=True), gate()

    def forward(self, x):
        return x * self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))


class MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, kernel: int, stride: int):
        super().__init__()
        hidden = cin * expand
        layers = [conv_bn_act(cin, hidden, 1)] if expand != 1 else []
        layers += [conv_bn_act(hidden, hidden, kernel, stride, groups=hidden),
                   SqueezeExcitation(hidden, max(1, cin // 4)),  # se ratio 0.25 of the input
                   conv_bn_act(hidden, cout, 1, act=None)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout  # stochastic depth is the identity here

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


class EfficientNet(nn.Module):
    def __init__(self, stages=B0_STAGES, num_classes: int = 1000, head: int = 1280):
        super().__init__()
        layers, cin = [conv_bn_act(3, 32, 3, 2)], 32
        for expand, kernel, stride, cout, repeats in stages:
            for i in range(repeats):
                layers.append(MBConv(cin, cout, expand, kernel, stride if i == 0 else 1))
                cin = cout
        layers.append(conv_bn_act(cin, head, 1))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(head, num_classes))

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


def efficientnet_b0(num_classes: int = 1000) -> EfficientNet:
    return EfficientNet(B0_STAGES, num_classes)
