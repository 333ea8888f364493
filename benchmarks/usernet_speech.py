"""Speech front end: wav2vec2-style 1-D convolution encoder (GroupNorm, GELU), a depthwise 1-D conv block, a small transformer.
A user's network, not in the zoo (random weights), exported to ONNX:

    python benchmarks/usernet_speech.py speech.onnx
    python benchmarks/bench_models.py --models speech.onnx --onnx
"""
import sys, torch, torch.nn as nn
class Net(nn.Module):
    def __init__(s):
        super().__init__(); C = 256
        layers = [nn.Conv1d(1, C, 10, 5, bias=False), nn.GroupNorm(C, C), nn.GELU()]
        for k, st in ((3, 2), (3, 2), (3, 2), (3, 2), (2, 2), (2, 2)): layers += [nn.Conv1d(C, C, k, st, bias=False), nn.GELU()]
        s.fe = nn.Sequential(*layers); s.ln = nn.LayerNorm(C); s.proj = nn.Linear(C, 192)
        s.pos = nn.Conv1d(192, 192, 31, padding=15, groups=16)
        s.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(192, 4, 768, 0.0, activation="gelu", batch_first=True, norm_first=True), 4, enable_nested_tensor=False)
        s.dw = nn.Sequential(nn.Conv1d(192, 192, 15, padding=7, groups=192), nn.BatchNorm1d(192), nn.SiLU(), nn.Conv1d(192, 192, 1))
        s.out = nn.Linear(192, 32)
    def forward(s, wav):
        x = s.fe(wav).transpose(1, 2); x = s.proj(s.ln(x))
        x = x + nn.functional.gelu(s.pos(x.transpose(1, 2))).transpose(1, 2)
        x = s.enc(x); x = x + s.dw(x.transpose(1, 2)).transpose(1, 2)
        return s.out(x).log_softmax(-1)
torch.manual_seed(0); m = Net().eval()
for mod in m.modules():
    if isinstance(mod, nn.BatchNorm1d): mod.running_mean.uniform_(-0.2, 0.2); mod.running_var.uniform_(0.5, 1.5)
torch.onnx.export(m, (torch.randn(1, 1, 32000),), sys.argv[1] if len(sys.argv) > 1 else "speech.onnx", opset_version=14, dynamo=False); print("ok")
