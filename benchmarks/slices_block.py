"""One attention layer (DeiT-S: 197 tokens, 6 heads of 64; GPT-2: 128 tokens, 12 of 64) through
ONNX, built on its seeds with and without the slice rewrite (``tasks/slices.py``), timed in
alternating rounds and profiled per function (``results-models-slices-zen4-9.txt``).

    .venv/bin/python benchmarks/slices_block.py
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tensortune.frontend import from_onnx  # noqa: E402
from tensortune.tasks import build_model  # noqa: E402
from tensortune.tasks.graph import GraphOptions  # noqa: E402
from tensortune.tasks.profile import profile_model  # noqa: E402
from tensortune.workload import default_target  # noqa: E402
from tensortune.zoo.gpt2 import CausalSelfAttention, GPT2Config  # noqa: E402
from tensortune.zoo.vit import Attention  # noqa: E402

DENSE = ("matmul_add", "matmul3")  # the projections: the same kernels either way


def main() -> None:
    torch.manual_seed(0)
    layers = [("deit", Attention(384, heads=6).eval(), torch.randn(1, 197, 384)),
              ("gpt2", CausalSelfAttention(GPT2Config()).eval(), torch.randn(1, 128, 768))]
    target = default_target(2)
    with tempfile.TemporaryDirectory() as tmp:
        for name, net, x in layers:
            path = Path(tmp) / f"{name}.onnx"
            torch.onnx.export(net, (x,), str(path), opset_version=17, dynamo=False)
            model = from_onnx(path)
            built = {label: build_model(model, target, {}, graph=GraphOptions(slice_first=on))
                     for label, on in (("slice_first", True), ("plain", False))}
            times = {label: [] for label in built}
            for _ in range(7):  # alternating rounds
                for label, m in built.items():
                    times[label].append(m.time(inputs=[x.numpy()], repeat=30).median)
            print(name, ", ".join(f"{label} {1e3 * np.median(t):.3f} ms"
                                  for label, t in times.items()))
            for label, m in built.items():
                functions = profile_model(m, repeat=30).functions
                print(f"  {label}:", [(f.name, round(f.seconds * 1e3, 3)) for f in functions
                                      if not any(d in f.name for d in DENSE)])


if __name__ == "__main__":
    main()
