"""VGG-11 (configuration "A", no batch-norm) as in torchvision."""
from __future__ import annotations

from torch import nn

CONFIG_A = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG(nn.Module):
    def __init__(self, config=CONFIG_A, num_classes: int = 1000):
        super().__init__()
        layers, cin = [], 3
        for v in config:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU(inplace=True)]
                cin = v
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(7)
        self.classifier = nn.Sequential(
            nn.Linear(cin * 7 * 7, 4096), nn.ReLU(inplace=True), nn.Dropout(),
            nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(),
            nn.Linear(4096, num_classes))

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


def vgg11(num_classes: int = 1000) -> VGG:
    return VGG(CONFIG_A, num_classes)
