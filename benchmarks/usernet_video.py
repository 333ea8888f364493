"""Video classifier: R(2+1)D-style factorized 3-D convolutions (1x3x3 spatial then 3x1x1
temporal), a full 3x3x3 convolution, BatchNorm3d, ReLU, a strided 3-D stem and 3-D average
pooling; 8 frames of 112x112, channels 24/72/120 (irregular), opset 14. A user's network, not
in the zoo (random weights), exported to ONNX:

    python benchmarks/usernet_video.py video.onnx
    python benchmarks/bench_models.py --models video.onnx --onnx
"""
import sys, torch, torch.nn as nn
def bn(c):
    b = nn.BatchNorm3d(c); b.running_mean.uniform_(-0.2, 0.2); b.running_var.uniform_(0.5, 1.5); return b
class R21(nn.Module):
    def __init__(s, ci, co, mid, st=1):
        super().__init__(); s.sp, s.b1 = nn.Conv3d(ci, mid, (1, 3, 3), (1, st, st), (0, 1, 1), bias=False), bn(mid)
        s.tm, s.b2 = nn.Conv3d(mid, co, (3, 1, 1), (st, 1, 1), (1, 0, 0), bias=False), bn(co)
        s.skip = nn.Sequential(nn.Conv3d(ci, co, 1, st, bias=False), bn(co)) if st > 1 or ci != co else nn.Identity()
    def forward(s, x): return torch.relu(s.skip(x) + s.b2(s.tm(torch.relu(s.b1(s.sp(x))))))
class Net(nn.Module):
    def __init__(s):
        super().__init__(); s.stem = nn.Sequential(nn.Conv3d(3, 24, (3, 7, 7), (1, 2, 2), (1, 3, 3), bias=False), bn(24), nn.ReLU())
        s.body = nn.Sequential(R21(24, 24, 48), R21(24, 72, 96, 2), R21(72, 72, 120), R21(72, 120, 200, 2))
        s.full, s.bf = nn.Conv3d(120, 120, 3, 1, 1, bias=False), bn(120); s.fc = nn.Linear(120, 400)
    def forward(s, x):
        x = s.body(s.stem(x)); x = torch.relu(x + s.bf(s.full(x)))
        return s.fc(nn.functional.adaptive_avg_pool3d(x, 1).flatten(1))
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randn(1, 3, 8, 112, 112),), sys.argv[1] if len(sys.argv) > 1 else "video.onnx", opset_version=14, dynamo=False); print("ok")
