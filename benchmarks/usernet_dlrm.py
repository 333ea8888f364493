"""A recommendation model (DLRM-style): 26 categorical features looked up in embedding tables
(rows 1000-100000, width 48), a bottom MLP over 13 dense features, pairwise dot products of the
27 vectors (a batched matmul and a lower-triangle gather), a top MLP; a batch of 128, opset 14.
A user's network, not in the zoo (random weights), exported to ONNX:

    python benchmarks/usernet_dlrm.py dlrm.onnx
    python benchmarks/bench_models.py --models dlrm.onnx --onnx
"""
import sys, torch, torch.nn as nn
ROWS = [1000, 5000, 100000, 2000, 300, 40000, 700, 12000] * 3 + [90, 60000]
D = 48
class Net(nn.Module):
    def __init__(s):
        super().__init__(); s.emb = nn.ModuleList(nn.Embedding(r, D) for r in ROWS)
        s.bot = nn.Sequential(nn.Linear(13, 200), nn.ReLU(), nn.Linear(200, 72), nn.ReLU(), nn.Linear(72, D), nn.ReLU())
        n = len(ROWS) + 1; s.register_buffer("li", torch.tril_indices(n, n, -1)); s.top = nn.Sequential(nn.Linear(D + n * (n - 1) // 2, 400), nn.ReLU(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 1))
    def forward(s, dense, cats):
        x = s.bot(dense); z = torch.stack([x] + [e(cats[:, i]) for i, e in enumerate(s.emb)], 1)
        inter = torch.bmm(z, z.transpose(1, 2))[:, s.li[0], s.li[1]]
        return torch.sigmoid(s.top(torch.cat([x, inter], 1)))
torch.manual_seed(0); m = Net().eval()
cats = torch.stack([torch.randint(0, r, (128,)) for r in ROWS], 1)
torch.onnx.export(m, (torch.randn(128, 13), cats), sys.argv[1] if len(sys.argv) > 1 else "dlrm.onnx", opset_version=14, dynamo=False); print("ok")
