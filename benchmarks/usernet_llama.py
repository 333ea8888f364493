"""LLaMA-style decoder: RMSNorm, rotary embeddings, SwiGLU MLP, grouped-query attention, causal mask.
A user's network, not in the zoo (random weights), exported to ONNX:

    python benchmarks/usernet_llama.py llama.onnx
    python benchmarks/bench_models.py --models llama.onnx --onnx
"""
import sys, math, torch, torch.nn as nn
D, H, KV, L, T, F = 384, 6, 2, 4, 96, 1024
class RMS(nn.Module):
    def __init__(s, d): super().__init__(); s.w = nn.Parameter(torch.rand(d) + 0.5)
    def forward(s, x): return s.w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
def rot(x): a, b = x.chunk(2, -1); return torch.cat((-b, a), -1)
class Block(nn.Module):
    def __init__(s):
        super().__init__(); hd = D // H
        s.n1, s.n2 = RMS(D), RMS(D)
        s.q, s.k, s.v, s.o = nn.Linear(D, D, bias=False), nn.Linear(D, KV * hd, bias=False), nn.Linear(D, KV * hd, bias=False), nn.Linear(D, D, bias=False)
        s.g, s.u, s.d = nn.Linear(D, F, bias=False), nn.Linear(D, F, bias=False), nn.Linear(F, D, bias=False)
    def forward(s, x, cos, sin, mask):
        hd = D // H; h = s.n1(x)
        q = s.q(h).view(1, T, H, hd).transpose(1, 2); k = s.k(h).view(1, T, KV, hd).transpose(1, 2); v = s.v(h).view(1, T, KV, hd).transpose(1, 2)
        q = q * cos + rot(q) * sin; k = k * cos + rot(k) * sin
        k = k.repeat_interleave(H // KV, 1); v = v.repeat_interleave(H // KV, 1)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, -1) @ v
        x = x + s.o(a.transpose(1, 2).reshape(1, T, D))
        h = s.n2(x)
        return x + s.d(nn.functional.silu(s.g(h)) * s.u(h))
class Net(nn.Module):
    def __init__(s):
        super().__init__(); s.emb = nn.Embedding(8000, D); s.blocks = nn.ModuleList(Block() for _ in range(L)); s.norm = RMS(D); s.head = nn.Linear(D, 8000, bias=False)
        hd = D // H; inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd)); f = torch.outer(torch.arange(T).float(), inv); e = torch.cat((f, f), -1)
        s.register_buffer("cos", e.cos()[None, None]); s.register_buffer("sin", e.sin()[None, None])
        s.register_buffer("mask", torch.full((T, T), -1e9).triu(1)[None, None])
    def forward(s, ids):
        x = s.emb(ids)
        for b in s.blocks: x = b(x, s.cos, s.sin, s.mask)
        return s.head(s.norm(x)[:, -1])
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randint(0, 8000, (1, T)),), sys.argv[1] if len(sys.argv) > 1 else "llama.onnx", opset_version=17, dynamo=False, input_names=["input_ids"]); print("ok")
