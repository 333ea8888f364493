"""An Inception-v3-style classifier at 299x299: a stem of five convolutions and two max pools,
three 35x35 blocks (1x1, 5x5, double 3x3 and average-pooled branches), a grid reduction, four
17x17 blocks of factorized 1x7 / 7x1 convolutions, a reduction, two 8x8 blocks with split
1x3 / 3x1 branches, every branch concatenated; batch norm and ReLU after each convolution,
opset 11. A user's network, not in the zoo (random weights), exported to ONNX:

    python benchmarks/usernet_inception.py inception.onnx
    python benchmarks/bench_models.py --models inception.onnx --onnx
"""
import sys, torch, torch.nn as nn, torch.nn.functional as F
def cbr(i, o, k, s=1, p=0):
    return nn.Sequential(nn.Conv2d(i, o, k, s, p, bias=False), nn.BatchNorm2d(o, eps=1e-3), nn.ReLU())
class A(nn.Module):  # 35x35
    def __init__(s, i, pool):
        super().__init__()
        s.b1 = cbr(i, 64, 1)
        s.b5 = nn.Sequential(cbr(i, 48, 1), cbr(48, 64, 5, p=2))
        s.b3 = nn.Sequential(cbr(i, 64, 1), cbr(64, 96, 3, p=1), cbr(96, 96, 3, p=1))
        s.bp = cbr(i, pool, 1)
    def forward(s, x):
        return torch.cat([s.b1(x), s.b5(x), s.b3(x), s.bp(F.avg_pool2d(x, 3, 1, 1))], 1)
class B(nn.Module):  # 35 -> 17
    def __init__(s, i):
        super().__init__()
        s.b3 = cbr(i, 384, 3, 2)
        s.bd = nn.Sequential(cbr(i, 64, 1), cbr(64, 96, 3, p=1), cbr(96, 96, 3, 2))
    def forward(s, x):
        return torch.cat([s.b3(x), s.bd(x), F.max_pool2d(x, 3, 2)], 1)
class C(nn.Module):  # 17x17, factorized 7x7
    def __init__(s, i, c):
        super().__init__()
        s.b1 = cbr(i, 192, 1)
        s.b7 = nn.Sequential(cbr(i, c, 1), cbr(c, c, (1, 7), p=(0, 3)), cbr(c, 192, (7, 1), p=(3, 0)))
        s.bd = nn.Sequential(cbr(i, c, 1), cbr(c, c, (7, 1), p=(3, 0)), cbr(c, c, (1, 7), p=(0, 3)),
                             cbr(c, c, (7, 1), p=(3, 0)), cbr(c, 192, (1, 7), p=(0, 3)))
        s.bp = cbr(i, 192, 1)
    def forward(s, x):
        return torch.cat([s.b1(x), s.b7(x), s.bd(x), s.bp(F.avg_pool2d(x, 3, 1, 1))], 1)
class D(nn.Module):  # 17 -> 8
    def __init__(s, i):
        super().__init__()
        s.b3 = nn.Sequential(cbr(i, 192, 1), cbr(192, 320, 3, 2))
        s.b7 = nn.Sequential(cbr(i, 192, 1), cbr(192, 192, (1, 7), p=(0, 3)),
                             cbr(192, 192, (7, 1), p=(3, 0)), cbr(192, 192, 3, 2))
    def forward(s, x):
        return torch.cat([s.b3(x), s.b7(x), F.max_pool2d(x, 3, 2)], 1)
class E(nn.Module):  # 8x8, split 1x3 / 3x1
    def __init__(s, i):
        super().__init__()
        s.b1 = cbr(i, 320, 1)
        s.b3, s.b3a, s.b3b = cbr(i, 384, 1), cbr(384, 384, (1, 3), p=(0, 1)), cbr(384, 384, (3, 1), p=(1, 0))
        s.bd = nn.Sequential(cbr(i, 448, 1), cbr(448, 384, 3, p=1))
        s.bda, s.bdb = cbr(384, 384, (1, 3), p=(0, 1)), cbr(384, 384, (3, 1), p=(1, 0))
        s.bp = cbr(i, 192, 1)
    def forward(s, x):
        a, d = s.b3(x), s.bd(x)
        return torch.cat([s.b1(x), s.b3a(a), s.b3b(a), s.bda(d), s.bdb(d),
                          s.bp(F.avg_pool2d(x, 3, 1, 1))], 1)
class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.stem = nn.Sequential(cbr(3, 32, 3, 2), cbr(32, 32, 3), cbr(32, 64, 3, p=1),
                               nn.MaxPool2d(3, 2), cbr(64, 80, 1), cbr(80, 192, 3), nn.MaxPool2d(3, 2))
        s.body = nn.Sequential(A(192, 32), A(256, 64), A(288, 64), B(288), C(768, 128), C(768, 160),
                               C(768, 160), C(768, 192), D(768), E(1280), E(2048))
        s.fc = nn.Linear(2048, 1000)
    def forward(s, x):
        return s.fc(s.body(s.stem(x)).mean((2, 3)))
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randn(1, 3, 299, 299),), sys.argv[1] if len(sys.argv) > 1 else "inception.onnx", opset_version=11, dynamo=False); print("ok")
