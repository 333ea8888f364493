"""MobileNet V1 (width 1.0: depthwise-separable convolutions) and MobileNetV2 (width 1.0, as in
torchvision: inverted residuals with linear bottlenecks)."""
from __future__ import annotations

from torch import nn

# expansion t, output channels c, repeats n, first stride s (the paper's Table 2)
SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
            (6, 160, 3, 2), (6, 320, 1, 1))


def _conv_bn_relu6(cin: int, cout: int, kernel: int, stride: int = 1,
                   groups: int = 1) -> nn.Sequential:
    conv = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False)
    return nn.Sequential(conv, nn.BatchNorm2d(cout), nn.ReLU6(inplace=True))


# V1: output channels and stride of each depthwise-separable block (the paper's Table 1)
V1_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
             (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))


class MobileNetV1(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers, cin = [_conv_bn_relu6(3, 32, 3, 2)], 32
        for cout, stride in V1_BLOCKS:
            layers += [_conv_bn_relu6(cin, cin, 3, stride, groups=cin), _conv_bn_relu6(cin, cout, 1)]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(cin, num_classes)

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = [_conv_bn_relu6(cin, hidden, 1)] if expand != 1 else []
        layers += [_conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers, cin = [_conv_bn_relu6(3, 32, 3, 2)], 32
        for t, c, n, s in SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(_conv_bn_relu6(cin, 1280, 1))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


def mobilenet_v1(num_classes: int = 1000) -> MobileNetV1:
    return MobileNetV1(num_classes)


def mobilenet_v2(num_classes: int = 1000) -> MobileNetV2:
    return MobileNetV2(num_classes)
