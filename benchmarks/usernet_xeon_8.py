"""A user's CNN, not in the zoo: 3-channel stem on 150x150, inverted residuals with 5x5
depthwise, hardswish, squeeze-and-excitation, a grouped 3x3, channels 24/40/72/120/200, random
weights, exported to ONNX at opset 13:

    python benchmarks/usernet_xeon_8.py usernet.onnx
    python benchmarks/bench_models.py --models usernet.onnx --tune-minutes 4
"""
import sys

import torch
import torch.nn as nn

class IR(nn.Module):
    def __init__(s, cin, cout, exp, k, stride, se):
        super().__init__()
        mid = cin * exp
        s.pw = nn.Sequential(nn.Conv2d(cin, mid, 1), nn.BatchNorm2d(mid), nn.Hardswish())
        s.dw = nn.Sequential(nn.Conv2d(mid, mid, k, stride, k // 2, groups=mid), nn.BatchNorm2d(mid), nn.Hardswish())
        s.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, mid // 4, 1), nn.ReLU(), nn.Conv2d(mid // 4, mid, 1), nn.Hardsigmoid()) if se else None
        s.pj = nn.Sequential(nn.Conv2d(mid, cout, 1), nn.BatchNorm2d(cout))
        s.res = stride == 1 and cin == cout
    def forward(s, x):
        y = s.dw(s.pw(x))
        if s.se is not None: y = y * s.se(y)
        y = s.pj(y)
        return x + y if s.res else y
class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.stem = nn.Sequential(nn.Conv2d(3, 24, 3, 2, 1), nn.BatchNorm2d(24), nn.Hardswish())
        s.body = nn.Sequential(IR(24, 40, 3, 3, 2, False), IR(40, 40, 3, 5, 1, True), IR(40, 72, 4, 5, 2, True),
                               IR(72, 72, 3, 3, 1, False), IR(72, 120, 4, 5, 2, True), IR(120, 120, 3, 5, 1, True),
                               IR(120, 200, 4, 3, 2, True))
        s.group = nn.Sequential(nn.Conv2d(200, 200, 3, 1, 1, groups=25), nn.BatchNorm2d(200), nn.ReLU())
        s.head = nn.Sequential(nn.Conv2d(200, 960, 1), nn.Hardswish())
        s.fc = nn.Linear(960, 1000)
    def forward(s, x):
        x = s.head(s.group(s.body(s.stem(x))))
        return s.fc(x.mean((2, 3)))
torch.manual_seed(0)
m = Net().eval()
for mod in m.modules():
    if isinstance(mod, nn.BatchNorm2d):
        mod.running_mean.uniform_(-0.2, 0.2); mod.running_var.uniform_(0.5, 1.5)
torch.onnx.export(m, (torch.randn(1, 3, 150, 150),), sys.argv[1] if len(sys.argv) > 1 else "usernet.onnx", opset_version=13, dynamo=False)
print("ok")
