"""YOLOv5s (Ultralytics v6.0+ layout, depth 0.33, width 0.50): a CSP-Darknet backbone of C3
blocks with SiLU, SPPF (three chained 5x5 max pools, concatenated), a PANet neck (nearest
upsampling and concatenation, then stride-2 convolutions back down) and the detection head
with its box decoding as the exported model has it: sigmoid, grid offsets and anchor scales,
one ``[batch, boxes, 85]`` output (non-maximum suppression is left to the caller)."""
from __future__ import annotations

import torch
from torch import nn

ANCHORS = ((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119),
           (116, 90, 156, 198, 373, 326))  # pixels, for strides 8, 16, 32
STRIDES = (8, 16, 32)


class Conv(nn.Module):
    """Conv (no bias), batch norm (eps 1e-3), SiLU; 'same' padding unless given."""

    def __init__(self, cin: int, cout: int, kernel: int = 1, stride: int = 1,
                 padding: int | None = None):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride,
                              kernel // 2 if padding is None else padding, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-3)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool):
        super().__init__()
        self.cv1, self.cv2 = Conv(c, c, 1), Conv(c, c, 3)
        self.add = shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    """CSP bottleneck with three convolutions: half the channels through ``n`` bottlenecks."""

    def __init__(self, cin: int, cout: int, n: int = 1, shortcut: bool = True):
        super().__init__()
        c = cout // 2
        self.cv1, self.cv2, self.cv3 = Conv(cin, c), Conv(cin, c), Conv(2 * c, cout)
        self.m = nn.Sequential(*(Bottleneck(c, shortcut) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class SPPF(nn.Module):
    def __init__(self, cin: int, cout: int, k: int = 5):
        super().__init__()
        c = cin // 2
        self.cv1, self.cv2 = Conv(cin, c), Conv(4 * c, cout)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class Detect(nn.Module):
    def __init__(self, channels, num_classes: int = 80):
        super().__init__()
        self.no, self.na = num_classes + 5, len(ANCHORS[0]) // 2
        self.m = nn.ModuleList(nn.Conv2d(c, self.na * self.no, 1) for c in channels)
        self.register_buffer("anchors", torch.tensor(ANCHORS, dtype=torch.float32)
                             .view(len(ANCHORS), 1, self.na, 1, 1, 2), persistent=False)

    def forward(self, features):
        out = []
        for i, (conv, x) in enumerate(zip(self.m, features)):
            b, _, ny, nx = x.shape
            y = conv(x).view(b, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).sigmoid()
            yv, xv = torch.meshgrid(torch.arange(ny, dtype=torch.float32),
                                    torch.arange(nx, dtype=torch.float32), indexing="ij")
            grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2) - 0.5
            xy, wh, conf = y.split((2, 2, self.no - 4), 4)
            xy = (xy * 2 + grid) * STRIDES[i]
            wh = (wh * 2) ** 2 * self.anchors[i]
            out.append(torch.cat((xy, wh, conf), 4).view(b, self.na * ny * nx, self.no))
        return torch.cat(out, 1)


class YOLOv5(nn.Module):
    def __init__(self, depth: float = 0.33, width: float = 0.50, num_classes: int = 80):
        super().__init__()
        w = lambda c: int(c * width)  # noqa: E731 (channel counts are multiples of 8 here)
        d = lambda n: max(round(n * depth), 1)  # noqa: E731
        self.stem = nn.Sequential(Conv(3, w(64), 6, 2, 2), Conv(w(64), w(128), 3, 2),
                                  C3(w(128), w(128), d(3)))
        self.p3 = nn.Sequential(Conv(w(128), w(256), 3, 2), C3(w(256), w(256), d(6)))
        self.p4 = nn.Sequential(Conv(w(256), w(512), 3, 2), C3(w(512), w(512), d(9)))
        self.p5 = nn.Sequential(Conv(w(512), w(1024), 3, 2), C3(w(1024), w(1024), d(3)),
                                SPPF(w(1024), w(1024)))
        self.lat5, self.up = Conv(w(1024), w(512)), nn.Upsample(scale_factor=2, mode="nearest")
        self.top4 = C3(w(1024), w(512), d(3), False)
        self.lat4 = Conv(w(512), w(256))
        self.out3 = C3(w(512), w(256), d(3), False)
        self.down3 = Conv(w(256), w(256), 3, 2)
        self.out4 = C3(w(512), w(512), d(3), False)
        self.down4 = Conv(w(512), w(512), 3, 2)
        self.out5 = C3(w(1024), w(1024), d(3), False)
        self.detect = Detect((w(256), w(512), w(1024)), num_classes)

    def forward(self, x):
        p3 = self.p3(self.stem(x))
        p4 = self.p4(p3)
        h5 = self.lat5(self.p5(p4))
        h4 = self.lat4(self.top4(torch.cat((self.up(h5), p4), 1)))
        o3 = self.out3(torch.cat((self.up(h4), p3), 1))
        o4 = self.out4(torch.cat((self.down3(o3), h4), 1))
        o5 = self.out5(torch.cat((self.down4(o4), h5), 1))
        return self.detect((o3, o4, o5))


def yolo_v5s(num_classes: int = 80) -> YOLOv5:
    return YOLOv5(0.33, 0.50, num_classes)
