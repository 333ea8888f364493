"""Fast math: GELU (erf and tanh forms), sigmoid, SiLU, HardSwish, Mish, softmax, exp and tanh
as polynomials, same results, vector code in a convolution's epilogue."""
from __future__ import annotations

import re

import numpy as np
import torch
import tvm

from tensortune.frontend import from_torch
from tensortune.session import Session
from tensortune.space import apply_config, task_seeds
from tensortune.tasks import extract_tasks
from tensortune.tasks.graph import GraphOptions
from tensortune.workload import default_target, vector_lanes


class Activations(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(24, 40)
        self.gelu, self.gelu_tanh = torch.nn.GELU(), torch.nn.GELU(approximate="tanh")

    def forward(self, x):
        y = self.linear(x)
        return (torch.softmax(self.gelu(y), -1) + self.gelu_tanh(y) + torch.exp(-y * y)
                + torch.tanh(y))


def test_fast_math_replaces_libm_calls_and_keeps_float32_accuracy():
    torch.manual_seed(0)
    module, x = Activations().eval(), torch.randn(2, 37, 24) * 3
    with torch.no_grad():
        expected = module(x).numpy()
    names = {}
    for fast in (False, True):
        s = Session.from_torch(module, (x,), graph=GraphOptions(fast_math=fast))
        names[fast] = " ".join(t.name for t in s.extract())
        out = s.build(tuned=False).run(x.numpy())[0]
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert "fast_erf" in names[True] and "fast_softmax" in names[True]
    assert "fast_exp" in names[True] and "fast_tanh" in names[True]
    assert "fast" not in names[False]
    assert GraphOptions.of({"fast_math": False}).fast_math is False


class Gates(torch.nn.Module):
    """Every activation the fast-math pass writes out, on the same input."""

    ACTIVATIONS = (torch.nn.Sigmoid(), torch.nn.SiLU(), torch.nn.Hardsigmoid(),
                   torch.nn.Hardswish(), torch.nn.GELU(), torch.nn.GELU(approximate="tanh"),
                   torch.nn.Mish())

    def forward(self, x):
        return tuple(act(x) for act in self.ACTIVATIONS)


def test_activations_are_written_out_without_libm_and_match_torch_from_minus_ten_to_ten():
    x = torch.cat([torch.linspace(-10, 10, 2001), torch.empty(2000).uniform_(-10, 10)])[None]
    with torch.no_grad():
        expected = [y.numpy() for y in Gates()(x.double())]
    s = Session.from_torch(Gates(), (x,), graph=GraphOptions(fast_math=True))
    names = " ".join(t.name for t in s.extract())
    for got, want in zip(s.build(tuned=False).run(x.numpy()), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert "sigmoid" not in names and "log" not in names  # libm's exp, Mish's softplus
    assert "fast_exp" in names and "fast_erf" in names and "fast_tanh" in names
    # HardSwish's "/ 6" is a multiplication by 1/6 (vdivps issues once every 5 cycles)
    hardswish = Session.from_torch(torch.nn.Hardswish(), (x,)).extract()
    assert not any("divide" in t.name for t in hardswish)


def test_a_convolution_fused_with_silu_vectorizes_its_epilogue_with_no_libm_call():
    target = default_target(2)
    module = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 1), torch.nn.SiLU()).eval()
    tasks = extract_tasks(from_torch(module, (torch.randn(1, 16, 8, 8),)), target)
    [conv] = [t for t in tasks if "conv2d" in t.name]
    assert "fast_exp" in conv.name and "sigmoid" not in conv.name
    sch = apply_config(conv.task, task_seeds(conv.task)[0])
    asm = tvm.compile(sch.mod, target=tvm.target.Target(target)).mod.inspect_source("asm")
    assert not re.search(r"call\w*\s+(exp|erf|tanh|log)f?(@PLT)?\b", asm)
    reg = "zmm" if vector_lanes(target) == 16 else "ymm"
    # fast_exp's floor and sigmoid's 1 / (1 + e), a whole vector at a time
    assert re.search(rf"v(rndscale|round)ps\s.*%{reg}", asm)
    assert re.search(rf"vdivps\s.*%{reg}", asm)
