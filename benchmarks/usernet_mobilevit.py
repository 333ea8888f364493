"""A MobileViT-style network: inverted residuals with SiLU, blocks that unfold the feature map into
2x2 patches of tokens for a transformer and fold it back, 256x256, opset 14. A user's network,
not in the zoo (random weights), exported to ONNX:

    python benchmarks/usernet_mobilevit.py mobilevit.onnx
    python benchmarks/bench_models.py --models mobilevit.onnx --onnx
"""
import sys, torch, torch.nn as nn, torch.nn.functional as F
class MV2(nn.Module):
    def __init__(s, i, o, st, e=4):
        super().__init__(); h = i * e
        s.b = nn.Sequential(nn.Conv2d(i, h, 1, bias=False), nn.BatchNorm2d(h), nn.SiLU(), nn.Conv2d(h, h, 3, st, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.SiLU(), nn.Conv2d(h, o, 1, bias=False), nn.BatchNorm2d(o))
        s.r = st == 1 and i == o
    def forward(s, x): return x + s.b(x) if s.r else s.b(x)
class MViT(nn.Module):
    def __init__(s, c, d, depth, p=2):
        super().__init__(); s.p = p
        s.local = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1), nn.SiLU(), nn.Conv2d(c, d, 1))
        s.tf = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, 2 * d, 0.0, activation="gelu", batch_first=True, norm_first=True), depth, enable_nested_tensor=False)
        s.proj = nn.Conv2d(d, c, 1); s.fuse = nn.Conv2d(2 * c, c, 3, 1, 1)
    def forward(s, x):
        y = s.local(x); B, D, H, W = y.shape; p = s.p
        t = y.reshape(B, D, H // p, p, W // p, p).permute(0, 3, 5, 2, 4, 1).reshape(B * p * p, (H // p) * (W // p), D)
        t = s.tf(t)
        y = t.reshape(B, p, p, H // p, W // p, D).permute(0, 5, 3, 1, 4, 2).reshape(B, D, H, W)
        return s.fuse(torch.cat([x, s.proj(y)], 1))
class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.f = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.SiLU(), MV2(16, 24, 1), MV2(24, 48, 2), MV2(48, 48, 1), MV2(48, 64, 2), MViT(64, 96, 2), MV2(64, 80, 2), MViT(80, 120, 2), nn.Conv2d(80, 320, 1), nn.SiLU())
        s.fc = nn.Linear(320, 1000)
    def forward(s, x): return s.fc(F.adaptive_avg_pool2d(s.f(x), 1).flatten(1))
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randn(1, 3, 256, 256),), sys.argv[1] if len(sys.argv) > 1 else "mobilevit.onnx", opset_version=14, dynamo=False); print("ok")
