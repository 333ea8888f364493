"""An audio network, WaveNet-style: 12 gated residual layers of dilated causal Conv1d (kernel 2,
dilation 1 to 32, twice; tanh x sigmoid gates), 1x1 residual and skip convolutions, 64 residual
and 96 skip channels over 6000 samples, a softmax over 256 classes per sample, opset 13. A user's
network, not in the zoo (random weights), exported to ONNX:

    python benchmarks/usernet_wavenet.py wavenet.onnx
    python benchmarks/bench_models.py --models wavenet.onnx --onnx
"""
import sys, torch, torch.nn as nn, torch.nn.functional as F
class Layer(nn.Module):
    def __init__(s, d):
        super().__init__()
        s.d = d
        s.conv = nn.Conv1d(64, 128, 2, dilation=d)
        s.res, s.skip = nn.Conv1d(64, 64, 1), nn.Conv1d(64, 96, 1)
    def forward(s, x):
        h = s.conv(F.pad(x, (s.d, 0)))  # causal: only past samples
        g = torch.tanh(h[:, :64]) * torch.sigmoid(h[:, 64:])
        return x + s.res(g), s.skip(g)
class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.inp = nn.Conv1d(1, 64, 1)
        s.layers = nn.ModuleList([Layer(2 ** (i % 6)) for i in range(12)])
        s.out = nn.Sequential(nn.ReLU(), nn.Conv1d(96, 96, 1), nn.ReLU(), nn.Conv1d(96, 256, 1))
    def forward(s, x):
        x, total = s.inp(x), 0
        for layer in s.layers:
            x, skip = layer(x)
            total = total + skip
        return F.softmax(s.out(total), dim=1)
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randn(1, 1, 6000),), sys.argv[1] if len(sys.argv) > 1 else "wavenet.onnx", opset_version=13, dynamo=False); print("ok")
