"""Swin-style vision transformer: window attention with relative position bias, shifted windows (roll), patch merging.
A user's network, not in the zoo (random weights), exported to ONNX:

    python benchmarks/usernet_swin.py swin.onnx
    python benchmarks/bench_models.py --models swin.onnx --onnx
"""
import sys, torch, torch.nn as nn
W = 7
def part(x, ws):  # B H W C -> nW*B ws*ws C
    B, Hh, Ww, C = x.shape; x = x.view(B, Hh // ws, ws, Ww // ws, ws, C); return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, C)
def unpart(w, ws, Hh, Ww):
    C = w.shape[-1]; x = w.view(1, Hh // ws, Ww // ws, ws, ws, C); return x.permute(0, 1, 3, 2, 4, 5).reshape(1, Hh, Ww, C)
class WAttn(nn.Module):
    def __init__(s, dim, heads):
        super().__init__(); s.h = heads; s.qkv = nn.Linear(dim, dim * 3); s.proj = nn.Linear(dim, dim); s.scale = (dim // heads) ** -0.5
        s.table = nn.Parameter(torch.randn((2 * W - 1) ** 2, heads) * 0.02)
        c = torch.stack(torch.meshgrid(torch.arange(W), torch.arange(W), indexing="ij")).flatten(1); r = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0) + W - 1
        s.register_buffer("idx", (r[:, :, 0] * (2 * W - 1) + r[:, :, 1]).flatten())
    def forward(s, x, mask):
        n, N, C = x.shape; qkv = s.qkv(x).reshape(n, N, 3, s.h, C // s.h).permute(2, 0, 3, 1, 4); q, k, v = qkv[0], qkv[1], qkv[2]
        a = (q * s.scale) @ k.transpose(-2, -1)
        a = a + s.table[s.idx].view(N, N, -1).permute(2, 0, 1)[None]
        if mask is not None: a = a + mask[:, None]
        return s.proj((a.softmax(-1) @ v).transpose(1, 2).reshape(n, N, C))
class Block(nn.Module):
    def __init__(s, dim, heads, res, shift):
        super().__init__(); s.n1, s.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim); s.attn = WAttn(dim, heads); s.res, s.shift = res, shift
        s.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        if shift:
            img = torch.zeros(1, res, res, 1); cnt = 0
            for h in (slice(0, -W), slice(-W, -shift), slice(-shift, None)):
                for w in (slice(0, -W), slice(-W, -shift), slice(-shift, None)): img[:, h, w, :] = cnt; cnt += 1
            mw = part(img, W).squeeze(-1); m = mw[:, None] - mw[:, :, None]; s.register_buffer("mask", m.masked_fill(m != 0, -100.0))
        else: s.mask = None
    def forward(s, x):
        r = s.res; C = x.shape[-1]; h = s.n1(x).view(1, r, r, C)
        if s.shift: h = torch.roll(h, (-s.shift, -s.shift), (1, 2))
        h = unpart(s.attn(part(h, W), s.mask), W, r, r)
        if s.shift: h = torch.roll(h, (s.shift, s.shift), (1, 2))
        x = x + h.reshape(1, r * r, C)
        return x + s.mlp(s.n2(x))
class Merge(nn.Module):
    def __init__(s, dim, res): super().__init__(); s.res = res; s.norm = nn.LayerNorm(4 * dim); s.red = nn.Linear(4 * dim, 2 * dim, bias=False)
    def forward(s, x):
        r = s.res; x = x.view(1, r, r, -1); x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
        return s.red(s.norm(x.view(1, (r // 2) ** 2, -1)))
class Net(nn.Module):
    def __init__(s):
        super().__init__(); s.embed = nn.Conv2d(3, 64, 4, 4); s.en = nn.LayerNorm(64)
        s.body = nn.Sequential(Block(64, 2, 56, 0), Block(64, 2, 56, 3), Merge(64, 56), Block(128, 4, 28, 0), Block(128, 4, 28, 3), Merge(128, 28), Block(256, 8, 14, 0), Block(256, 8, 14, 3))
        s.norm = nn.LayerNorm(256); s.fc = nn.Linear(256, 1000)
    def forward(s, x):
        x = s.en(s.embed(x).flatten(2).transpose(1, 2)); x = s.norm(s.body(x)); return s.fc(x.mean(1))
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randn(1, 3, 224, 224),), sys.argv[1] if len(sys.argv) > 1 else "swin.onnx", opset_version=14, dynamo=False); print("ok")
