"""ONNX's decomposed group and instance norms carried channels-last (``tasks.norms``: a group
norm put back together for the layout conversion, then decomposed again in NHWC; per-channel
constants at full rank): the graph, the build, the option."""
import numpy as np
import pytest
import torch

from tensortune.tasks import build_model
from tensortune.tasks.extract import prepare
from tensortune.tasks.graph import GraphOptions
from tensortune.workload import default_target

from .graph_checks import onnx_model, op_names

nn = torch.nn


class Norms(nn.Module):
    """A 3-channel stem to 24 channels on 19x19, an instance norm with its affine scale and
    shift, a GroupNorm of 6 groups with SiLU (a diffusion U-Net's), one of a single group, and
    a GroupNorm on a 3-D volume between 3-D convolutions."""

    def __init__(self, c=24):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.inorm = nn.InstanceNorm2d(c, affine=True)
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.gn = nn.GroupNorm(6, c)
        self.one = nn.GroupNorm(1, c)
        self.head = nn.Conv2d(c, 8, 1)
        self.vol = nn.Conv3d(1, 12, 3, padding=1)
        self.gn3 = nn.GroupNorm(4, 12)
        self.vol2 = nn.Conv3d(12, 4, 1)

    def forward(self, x, v):
        x = torch.relu(self.inorm(self.stem(x)))
        x = self.one(self.conv(nn.functional.silu(self.gn(x))))
        v = self.vol2(nn.functional.silu(self.gn3(self.vol(v))))
        return self.head(x).mean((2, 3)) + v.mean((2, 3, 4)).sum(1, keepdim=True)


@pytest.fixture(scope="module")
def norms(tmp_path_factory):
    torch.manual_seed(0)
    module = Norms().eval()
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.GroupNorm, nn.InstanceNorm2d)):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return onnx_model(module, (torch.randn(1, 3, 19, 19), torch.randn(1, 1, 5, 9, 9)),
                      tmp_path_factory.mktemp("norms") / "norms.onnx")


def _norms_pass_only(mod):
    from tensortune.tasks.norms import norms_pass

    return norms_pass()(mod)


def test_the_norms_stay_channels_last(norms):
    model, _, _ = norms
    # before the layout conversion: the three group norms are one operator each
    assert op_names(_norms_pass_only(model.mod)).count("relax.nn.group_norm") == 3
    ops = op_names(prepare(model.mod))
    # after it: means again (TOPI's group norm is one unvectorized reduction), the instance
    # norm's variance as imported, and only the two inputs' transposes, none between the
    # convolutions and the norms
    assert "relax.nn.group_norm" not in ops and ops.count("relax.variance") == 1, ops
    assert ops.count("relax.permute_dims") == 2, ops
    off = op_names(prepare(model.mod, GraphOptions(norms=False)))
    assert off.count("relax.permute_dims") > 2, off


def test_the_model_with_group_norms_matches_pytorch(norms):
    model, inputs, expected = norms
    compiled = build_model(model, default_target(2), {})
    np.testing.assert_allclose(compiled.run(*inputs)[0], expected, rtol=1e-4, atol=1e-4)
    assert compiled.default_functions() == []


def test_runs_saved_before_the_rewrite_keep_the_decomposed_norms():
    assert GraphOptions.of({"layout": "nhwc"}).norms is False
    assert GraphOptions().norms is True
