"""MobileNetV3-Large (Howard et al. 2019; torchvision's layout, width 1.0): inverted residuals
with hardswish, and squeeze-and-excitation gated by hardsigmoid."""
from __future__ import annotations

from torch import nn

from .efficientnet import SqueezeExcitation, conv_bn_act

# input, kernel, expanded, output, squeeze-and-excite, activation, stride (the paper's Table 1)
LARGE = ((16, 3, 16, 16, False, "RE", 1), (16, 3, 64, 24, False, "RE", 2),
         (24, 3, 72, 24, False, "RE", 1), (24, 5, 72, 40, True, "RE", 2),
         (40, 5, 120, 40, True, "RE", 1), (40, 5, 120, 40, True, "RE", 1),
         (40, 3, 240, 80, False, "HS", 2), (80, 3, 200, 80, False, "HS", 1),
         (80, 3, 184, 80, False, "HS", 1), (80, 3, 184, 80, False, "HS", 1),
         (80, 3, 480, 112, True, "HS", 1), (112, 3, 672, 112, True, "HS", 1),
         (112, 5, 672, 160, True, "HS", 2), (160, 5, 960, 160, True, "HS", 1),
         (160, 5, 960, 160, True, "HS", 1))
ACTIVATIONS = {"RE": nn.ReLU, "HS": nn.Hardswish}


def make_divisible(v: float, divisor: int = 8) -> int:
    """The nearest multiple of ``divisor``, never more than 10% below ``v`` (as in the paper's
    reference code)."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class InvertedResidualV3(nn.Module):
    def __init__(self, cin, kernel, hidden, cout, se, act, stride):
        super().__init__()
        act = ACTIVATIONS[act]
        layers = [conv_bn_act(cin, hidden, 1, act=act)] if hidden != cin else []
        layers.append(conv_bn_act(hidden, hidden, kernel, stride, groups=hidden, act=act))
        if se:
            layers.append(SqueezeExcitation(hidden, make_divisible(hidden // 4), nn.ReLU,
                                            nn.Hardsigmoid))
        layers.append(conv_bn_act(hidden, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


class MobileNetV3(nn.Module):
    def __init__(self, settings=LARGE, last: int = 1280, num_classes: int = 1000):
        super().__init__()
        layers = [conv_bn_act(3, settings[0][0], 3, 2, act=nn.Hardswish)]
        layers += [InvertedResidualV3(*s) for s in settings]
        cin = settings[-1][3]
        layers.append(conv_bn_act(cin, 6 * cin, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * cin, last), nn.Hardswish(inplace=True),
                                        nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


def mobilenet_v3_large(num_classes: int = 1000) -> MobileNetV3:
    return MobileNetV3(LARGE, 1280, num_classes)
