"""A segmentation network, DeepLabV3-style: a residual backbone at output stride 8 whose last two
stages use dilated 3x3 convolutions (dilation 2 and 4), an ASPP head (1x1, 3x3 at dilation 6, 12
and 18, image pooling upsampled back), 21 classes upsampled bilinearly (align_corners) to the
257x257 input, opset 11. A user's network, not in the zoo (random weights), exported to ONNX:

    python benchmarks/usernet_deeplab.py deeplab.onnx
    python benchmarks/bench_models.py --models deeplab.onnx --onnx
"""
import sys, torch, torch.nn as nn, torch.nn.functional as F
def cbr(i, o, k=3, s=1, d=1):
    return nn.Sequential(nn.Conv2d(i, o, k, s, d * (k // 2), dilation=d, bias=False),
                         nn.BatchNorm2d(o), nn.ReLU())
class Block(nn.Module):
    def __init__(s, i, o, stride=1, d=1):
        super().__init__()
        s.a, s.b = cbr(i, o, 3, stride, d), nn.Sequential(
            nn.Conv2d(o, o, 3, 1, d, dilation=d, bias=False), nn.BatchNorm2d(o))
        s.skip = nn.Identity() if (i == o and stride == 1) else nn.Sequential(
            nn.Conv2d(i, o, 1, stride, bias=False), nn.BatchNorm2d(o))
    def forward(s, x):
        return F.relu(s.b(s.a(x)) + s.skip(x))
class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.stem = nn.Sequential(cbr(3, 24, 3, 2), cbr(24, 48))
        s.l1 = nn.Sequential(Block(48, 72, 2), Block(72, 72))
        s.l2 = nn.Sequential(Block(72, 120, 2), Block(120, 120))
        s.l3 = nn.Sequential(Block(120, 160, 1, 2), Block(160, 160, 1, 2))
        s.l4 = nn.Sequential(Block(160, 200, 1, 4), Block(200, 200, 1, 4))
        s.aspp = nn.ModuleList([cbr(200, 96, 1)] + [cbr(200, 96, 3, 1, d) for d in (6, 12, 18)])
        s.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(200, 96, 1), nn.ReLU())
        s.proj = cbr(5 * 96, 96, 1)
        s.head = nn.Sequential(cbr(96, 96), nn.Conv2d(96, 21, 1))
    def forward(s, x):
        size = x.shape[-2:]
        f = s.l4(s.l3(s.l2(s.l1(s.stem(x)))))
        p = F.interpolate(s.pool(f), size=f.shape[-2:], mode="bilinear", align_corners=False)
        y = s.head(s.proj(torch.cat([m(f) for m in s.aspp] + [p], 1)))
        return F.interpolate(y, size=size, mode="bilinear", align_corners=True)
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randn(1, 3, 257, 257),), sys.argv[1] if len(sys.argv) > 1 else "deeplab.onnx", opset_version=11, dynamo=False); print("ok")
