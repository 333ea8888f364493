"""Zero pads taken into the convolution after them (``tasks.pads``): a WaveNet-style causal
gated block and TensorFlow's SAME padding, through ONNX and torch.export alike; a pad two
convolutions read, one of another value and a reflecting one stay correct; the option off and
old runs keep the pads."""
import re

import numpy as np
import pytest
import torch

from tensortune.frontend import from_torch
from tensortune.tasks import build_model, extract_tasks
from tensortune.tasks.extract import prepare
from tensortune.tasks.graph import GraphOptions
from tensortune.workload import default_target

from .graph_checks import onnx_model, op_calls, op_names

nn = torch.nn
F = nn.functional


class Gated(nn.Module):
    """Causal dilated 1-D convolutions (kernel 2, dilation 1 then 3, 20 -> 40 channels split
    into tanh and sigmoid halves) on 37 samples of 3 channels, residual 1x1 convolutions and a
    softmax over 24 output channels per sample."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Conv1d(3, 20, 1)
        self.convs = nn.ModuleList([nn.Conv1d(20, 40, 2, dilation=d) for d in (1, 3)])
        self.res = nn.ModuleList([nn.Conv1d(20, 20, 1) for _ in range(2)])
        self.out = nn.Conv1d(20, 24, 1)

    def forward(self, x):
        x = self.inp(x)
        for conv, res, d in zip(self.convs, self.res, (1, 3)):
            h = conv(F.pad(x, (d, 0)))
            x = x + res(torch.tanh(h[:, :20]) * torch.sigmoid(h[:, 20:]))
        return torch.softmax(self.out(x), dim=1)


class Same(nn.Module):
    """TensorFlow's SAME padding (one more row and column after than before) of a stride-2 3x3
    convolution, 3 -> 24 channels on 38x38; one pad read by two convolutions; a pad of ones
    and a reflecting pad, which no convolution may take."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 24, 3, 2)
        self.b, self.c = nn.Conv2d(24, 24, 3), nn.Conv2d(24, 24, (3, 1))
        self.d, self.e = nn.Conv2d(24, 24, 3), nn.Conv2d(24, 24, 3)

    def forward(self, x):
        y = F.relu(self.a(F.pad(x, (0, 1, 0, 1))))
        p = F.pad(y, (2, 0, 1, 1))
        y = self.b(p) + self.c(p)[:, :, :, 2:]
        y = self.d(F.pad(y, (1, 1, 1, 1), value=1.0))
        return self.e(F.pad(y, (1, 1, 1, 1), mode="reflect"))


def _zero_pads(mod) -> list:
    """The zero pads left in a prepared module's main function (Relax's, or TOPI's as the
    ONNX converter writes them)."""
    return [c for c in op_calls(mod)
            if (c.op.name == "relax.nn.pad" and float(c.attrs.pad_value) == 0.0)
            or (c.op.name == "relax.call_tir" and re.fullmatch(r"pad\d*", c.args[0].name_hint)
                and "T.float32(0.0)" in mod[c.args[0]].script())]


def _ops(name: str) -> tuple:
    return tuple(sorted(re.sub(r"\d+$", "", op) for op in name.split("_")))


@pytest.fixture(scope="module", params=["gated", "same"])
def network(request, tmp_path_factory):
    torch.manual_seed(0)
    module, shape = {"gated": (Gated, (1, 3, 37)), "same": (Same, (1, 3, 38, 38))}[request.param]
    module = module().eval()
    example = (torch.randn(*shape),)
    onnx, (x,), expected = onnx_model(module, example,
                                      tmp_path_factory.mktemp("pads") / "net.onnx")
    return request.param, onnx, from_torch(module, example), x, expected


def test_zero_pads_become_the_convolutions_padding_alike_from_onnx_and_torch(network):
    name, onnx, exported, _, _ = network
    for model in (onnx, exported):
        prepared = prepare(model.mod)
        assert not _zero_pads(prepared), (model.source, prepared.script(show_meta=False))
        if name == "gated":
            # the gate's halves and the softmax stay one-row: no copy between the layers
            ops = op_names(prepared)
            assert ops.count("relax.permute_dims") <= 2, (model.source, ops)
    target = default_target(2)
    names = [sorted(t.name for t in extract_tasks(model, target)) for model in (onnx, exported)]
    # the same convolutions (their operators, in whatever order and numbering each import
    # gives); the reflecting pad is imported differently (TOPI's mirror_pad, torch's take)
    convs = [sorted(_ops(n) for n in found if "conv" in n) for found in names]
    assert convs[0] == convs[1] and len(convs[0]) == {"gated": 5, "same": 4}[name], names
    assert not [n for n in names[0] + names[1] if re.search(r"(^|_)pad\d*(_|$)", n)
                and "conv" not in n and name == "gated"], names
    if name == "gated":  # a layout change at the input and one at the output, none between
        assert sum("transpose" in n for n in names[0]) <= 2, names[0]


def test_the_folded_models_match_pytorch_and_the_option_off_keeps_the_pads(network):
    name, onnx, exported, x, expected = network
    target = default_target(2)
    for model in (onnx, exported):
        compiled = build_model(model, target, {})
        np.testing.assert_allclose(compiled.run(x)[0], expected, rtol=1e-4, atol=1e-4)
    off = prepare(onnx.mod, GraphOptions(fold_pads=False))
    assert len(_zero_pads(off)) == 2
    assert GraphOptions.of({"layout": "nhwc"}).fold_pads is False  # runs saved before it
