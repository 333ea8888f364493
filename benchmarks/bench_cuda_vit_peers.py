"""cuBLAS (PyTorch FP32, TF32 off) on DeiT-S's six matrix products at batch 1, timed as the
device runner times tensortune's kernels (a CUDA graph of many calls, between CUDA events), to
set beside the tuned kernels' times in a batch's ``results.jsonl``.

    python benchmarks/bench_cuda_vit_peers.py [--rounds 9]      # on the GPU host
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

TOKENS, DIM, HEADS = 197, 384, 6
SHAPES = {  # the fused functions' names in tensortune's DeiT-S build, and what each computes
    "fused_matmul_add2": ("linear", TOKENS, DIM, 3 * DIM),  # q, k, v
    "matmul1": ("bmm", HEADS, TOKENS, DIM // HEADS, TOKENS),  # q . k^T
    "matmul2": ("bmm", HEADS, TOKENS, TOKENS, DIM // HEADS),  # attention . v
    "fused_matmul3_add3": ("linear", TOKENS, DIM, DIM),  # projection
    "fused_matmul4_add4": ("linear", TOKENS, DIM, 4 * DIM),  # MLP up
    "fused_matmul5_add3": ("linear", TOKENS, 4 * DIM, DIM),  # MLP down
}


def main() -> None:
    import torch
    import torch.nn.functional as F

    from bench_cuda_peers import calls_for, time_torch

    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = "cuda"
    fns = {}
    for name, (kind, *dims) in SHAPES.items():
        if kind == "linear":
            m, k, n = dims
            x, w, b = (torch.randn(*s, device=dev) for s in ((m, k), (n, k), (n,)))
            fns[name] = lambda x=x, w=w, b=b: F.linear(x, w, b)
        else:
            h, m, k, n = dims
            a, c = torch.randn(h, m, k, device=dev), torch.randn(h, k, n, device=dev)
            fns[name] = lambda a=a, c=c: torch.bmm(a, c)
    numbers = {name: calls_for(time_torch(fn, 20), 2.0) for name, fn in fns.items()}
    times = {name: [] for name in fns}
    for _ in range(args.rounds):  # interleaved: every shape once per round
        for name, fn in fns.items():
            times[name].append(time_torch(fn, numbers[name]))
    out = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    print(json.dumps({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                      "cublas_fp32_us": {k: round(v, 2) for k, v in out.items()}}))


if __name__ == "__main__":
    main()
