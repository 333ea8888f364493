"""A detection neck: a strided CNN backbone (LeakyReLU, 120 and 200 channels), FPN laterals, a 4x4
stride-2 transposed convolution, bilinear resize to a size and nearest by a factor, 320x320,
opset 11. A user's network,
not in the zoo (random weights), exported to ONNX:

    python benchmarks/usernet_fpn.py fpn.onnx
    python benchmarks/bench_models.py --models fpn.onnx --onnx
"""
import sys, torch, torch.nn as nn, torch.nn.functional as F
class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.c1 = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.LeakyReLU(0.1))
        s.c2 = nn.Sequential(nn.Conv2d(32, 64, 3, 2, 1), nn.BatchNorm2d(64), nn.LeakyReLU(0.1))
        s.c3 = nn.Sequential(nn.Conv2d(64, 120, 3, 2, 1), nn.BatchNorm2d(120), nn.LeakyReLU(0.1))
        s.c4 = nn.Sequential(nn.Conv2d(120, 200, 3, 2, 1), nn.BatchNorm2d(200), nn.LeakyReLU(0.1))
        s.l4, s.l3, s.l2 = nn.Conv2d(200, 72, 1), nn.Conv2d(120, 72, 1), nn.Conv2d(64, 72, 1)
        s.up = nn.ConvTranspose2d(72, 72, 4, 2, 1)
        s.o3, s.o2 = nn.Conv2d(72, 72, 3, 1, 1), nn.Conv2d(72, 72, 3, 1, 1)
        s.head = nn.Conv2d(144, 24, 1)
    def forward(s, x):
        a = s.c2(s.c1(x)); b = s.c3(a); c = s.c4(b)
        p4 = s.l4(c); p3 = s.l3(b) + F.interpolate(p4, size=b.shape[-2:], mode="bilinear", align_corners=False)
        p2 = s.l2(a) + s.up(p3)
        p3o = F.interpolate(s.o3(p3), scale_factor=2.0, mode="nearest")
        return torch.sigmoid(s.head(torch.cat([s.o2(p2), p3o], 1)))
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randn(1, 3, 320, 320),), sys.argv[1] if len(sys.argv) > 1 else "fpn.onnx", opset_version=11, dynamo=False); print("ok")
