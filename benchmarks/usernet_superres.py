"""Super-resolution, EDSR-style: a 3 -> 40 channel head, six residual blocks of two 3x3
convolutions (40 channels, ReLU, residual scaling 0.1), a 40 -> 160 convolution and
PixelShuffle(2) to twice the size, and a 3-channel tail on 300x300; a 150x150 image (sizes
and channels irregular), opset 11. A user's network, not in the zoo (random weights),
exported to ONNX:

    python benchmarks/usernet_superres.py superres.onnx
    python benchmarks/bench_models.py --models superres.onnx --onnx
"""
import sys, torch, torch.nn as nn
class Block(nn.Module):
    def __init__(s, c):
        super().__init__(); s.a, s.b = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)
    def forward(s, x): return x + 0.1 * s.b(torch.relu(s.a(x)))
class Net(nn.Module):
    def __init__(s, c=40):
        super().__init__(); s.head = nn.Conv2d(3, c, 3, padding=1)
        s.body = nn.Sequential(*[Block(c) for _ in range(6)], nn.Conv2d(c, c, 3, padding=1))
        s.up = nn.Sequential(nn.Conv2d(c, 4 * c, 3, padding=1), nn.PixelShuffle(2))
        s.tail = nn.Conv2d(c, 3, 3, padding=1)
    def forward(s, x):
        h = s.head(x)
        return s.tail(s.up(h + s.body(h)))
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randn(1, 3, 150, 150),), sys.argv[1] if len(sys.argv) > 1 else "superres.onnx", opset_version=11, dynamo=False); print("ok")
