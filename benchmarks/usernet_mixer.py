"""MLP-Mixer (S/16-like at 160x160: 100 patches, 8 layers, 256 channels): token-mixing MLPs over
the patch axis (a transpose, then dense layers of 100 -> 128 -> 100), channel-mixing MLPs,
LayerNorm, GELU; opset 14. A user's network, not in the zoo (random weights), exported to ONNX:

    python benchmarks/usernet_mixer.py mixer.onnx
    python benchmarks/bench_models.py --models mixer.onnx --onnx
"""
import sys, torch, torch.nn as nn
N, C = 100, 256
class Mix(nn.Module):
    def __init__(s):
        super().__init__(); s.n1, s.n2 = nn.LayerNorm(C), nn.LayerNorm(C)
        s.tok = nn.Sequential(nn.Linear(N, 128), nn.GELU(), nn.Linear(128, N)); s.ch = nn.Sequential(nn.Linear(C, 1024), nn.GELU(), nn.Linear(1024, C))
    def forward(s, x):
        x = x + s.tok(s.n1(x).transpose(1, 2)).transpose(1, 2); return x + s.ch(s.n2(x))
class Net(nn.Module):
    def __init__(s):
        super().__init__(); s.embed = nn.Conv2d(3, C, 16, 16); s.body = nn.Sequential(*[Mix() for _ in range(8)]); s.norm, s.fc = nn.LayerNorm(C), nn.Linear(C, 1000)
    def forward(s, x): return s.fc(s.norm(s.body(s.embed(x).flatten(2).transpose(1, 2))).mean(1))
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randn(1, 3, 160, 160),), sys.argv[1] if len(sys.argv) > 1 else "mixer.onnx", opset_version=14, dynamo=False); print("ok")
