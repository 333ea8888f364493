"""PointNet classifier over 1024 points: 1x1 Conv1d layers with BatchNorm1d, input and feature
transform networks (a 3x3 and a 64x64 matrix predicted per cloud and applied with a batched
matmul), a max over points, and a classifier head; opset 13. A user's network, not in the zoo
(random weights), exported to ONNX:

    python benchmarks/usernet_pointnet.py pointnet.onnx
    python benchmarks/bench_models.py --models pointnet.onnx --onnx
"""
import sys, torch, torch.nn as nn
def mlp(*cs):
    layers = []
    for a, b in zip(cs, cs[1:]):
        n = nn.BatchNorm1d(b); n.running_mean.uniform_(-0.2, 0.2); n.running_var.uniform_(0.5, 1.5)
        layers += [nn.Conv1d(a, b, 1), n, nn.ReLU()]
    return nn.Sequential(*layers)
class TNet(nn.Module):
    def __init__(s, k):
        super().__init__(); s.k, s.f = k, mlp(k, 64, 128, 1024); s.h = nn.Sequential(nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, k * k))
    def forward(s, x):
        return s.h(s.f(x).max(2)[0]).view(-1, s.k, s.k) + torch.eye(s.k)
class Net(nn.Module):
    def __init__(s):
        super().__init__(); s.t3, s.f1, s.t64, s.f2 = TNet(3), mlp(3, 64, 64), TNet(64), mlp(64, 64, 128, 1024)
        s.head = nn.Sequential(nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 40))
    def forward(s, pts):
        x = torch.bmm(s.t3(pts), pts); x = s.f1(x); x = torch.bmm(s.t64(x), x)
        return s.head(s.f2(x).max(2)[0])
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randn(1, 3, 1024),), sys.argv[1] if len(sys.argv) > 1 else "pointnet.onnx", opset_version=13, dynamo=False); print("ok")
