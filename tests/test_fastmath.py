"""Fast math: GELU (erf and tanh forms), softmax, exp and tanh as polynomials, same results."""
from __future__ import annotations

import numpy as np
import torch

from tensortune.session import Session
from tensortune.tasks.graph import GraphOptions


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
