"""A diffusion U-Net's middle: residual blocks with GroupNorm, SiLU and a time embedding added
per channel, self-attention and cross-attention to 77 text tokens over a 32x32 latent (1024
positions), a GEGLU feed-forward, a strided downsample and a nearest upsample; 200 channels
(irregular), opset 17. A user's network, not in the zoo (random weights), exported to ONNX:

    python benchmarks/usernet_diffusion.py diffusion.onnx
    python benchmarks/bench_models.py --models diffusion.onnx --onnx
"""
import sys, torch, torch.nn as nn, torch.nn.functional as F
C, T = 200, 77
class Res(nn.Module):
    def __init__(s, c):
        super().__init__(); s.n1, s.c1 = nn.GroupNorm(20, c), nn.Conv2d(c, c, 3, 1, 1); s.t = nn.Linear(256, c); s.n2, s.c2 = nn.GroupNorm(20, c), nn.Conv2d(c, c, 3, 1, 1)
    def forward(s, x, t):
        h = s.c1(F.silu(s.n1(x))) + s.t(F.silu(t))[:, :, None, None]; return x + s.c2(F.silu(s.n2(h)))
class Attn(nn.Module):
    def __init__(s, c, ctx):
        super().__init__(); s.n = nn.LayerNorm(c); s.q, s.k, s.v, s.o = nn.Linear(c, c, bias=False), nn.Linear(ctx, c, bias=False), nn.Linear(ctx, c, bias=False), nn.Linear(c, c); s.h = 5
    def forward(s, x, ctx=None):
        b, n, c = x.shape; y = s.n(x); ctx = y if ctx is None else ctx
        q, k, v = (t.reshape(b, -1, s.h, c // s.h).transpose(1, 2) for t in (s.q(y), s.k(ctx), s.v(ctx)))
        a = torch.softmax(q @ k.transpose(-1, -2) / (c // s.h) ** 0.5, -1) @ v
        return x + s.o(a.transpose(1, 2).reshape(b, n, c))
class Block(nn.Module):
    def __init__(s):
        super().__init__(); s.gn, s.pin = nn.GroupNorm(20, C), nn.Conv2d(C, C, 1); s.a1, s.a2 = Attn(C, C), Attn(C, 128); s.n3, s.ff1, s.ff2 = nn.LayerNorm(C), nn.Linear(C, 8 * C), nn.Linear(4 * C, C); s.pout = nn.Conv2d(C, C, 1)
    def forward(s, x, ctx):
        b, c, hh, ww = x.shape; y = s.pin(s.gn(x)).flatten(2).transpose(1, 2)
        y = s.a2(s.a1(y), ctx); g, gate = s.ff1(s.n3(y)).chunk(2, -1); y = y + s.ff2(g * F.gelu(gate))
        return x + s.pout(y.transpose(1, 2).reshape(b, c, hh, ww))
class Net(nn.Module):
    def __init__(s):
        super().__init__(); s.inp = nn.Conv2d(4, C, 3, 1, 1); s.temb = nn.Sequential(nn.Linear(64, 256), nn.SiLU(), nn.Linear(256, 256)); s.r1, s.r2 = Res(C), Res(C); s.blk = Block(); s.down = nn.Conv2d(C, C, 3, 2, 1); s.r3 = Res(C); s.out = nn.Conv2d(C, 4, 3, 1, 1)
    def forward(s, x, t, ctx):
        te = s.temb(t); h = s.r1(s.inp(x), te); h = s.blk(h, ctx); d = s.r3(s.down(h), te)
        h = s.r2(h + F.interpolate(d, scale_factor=2.0, mode="nearest"), te); return s.out(F.silu(h))
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randn(1, 4, 32, 32), torch.randn(1, 64), torch.randn(1, T, 128)), sys.argv[1] if len(sys.argv) > 1 else "diffusion.onnx", opset_version=17, dynamo=False); print("ok")
