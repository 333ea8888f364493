"""1-D convolutions as one-row 2-D ones (``tasks.conv1d``): what is left of the graph, the
models built from it, and the option that turns it off."""
import numpy as np
import pytest
import torch

from tensortune.tasks import build_model, extract_tasks
from tensortune.tasks.extract import prepare
from tensortune.tasks.graph import GraphOptions
from tensortune.workload import default_target

from .graph_checks import onnx_model, op_names

nn = torch.nn


class Speech(nn.Module):
    """Irregular shapes: one input channel and a strided 10-tap stem on 997 samples, an
    instance norm (GroupNorm with a group per channel), GELU, an unpadded stride-2 layer to 24
    channels, a dilated one to 72, a grouped 31-tap one (groups of 8), a depthwise 15-tap one
    with batch norm and SiLU, a pointwise one, and a transformer-style tail that reads the
    sequence channels-last."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv1d(1, 24, 10, 5, bias=False)
        self.norm = nn.GroupNorm(24, 24)
        self.down = nn.Conv1d(24, 24, 3, 2)
        self.dilated = nn.Conv1d(24, 72, 3, padding=2, dilation=2)
        self.grouped = nn.Conv1d(72, 72, 31, padding=15, groups=9)
        self.dw = nn.Conv1d(72, 72, 15, padding=7, groups=72)
        self.bn = nn.BatchNorm1d(72)
        self.pw = nn.Conv1d(72, 40, 1)
        self.ln = nn.LayerNorm(40)
        self.fc = nn.Linear(40, 12)

    def forward(self, x):
        x = nn.functional.gelu(self.norm(self.stem(x)))
        x = nn.functional.gelu(self.down(x))
        x = torch.relu(self.dilated(x))
        x = x + nn.functional.gelu(self.grouped(x))
        x = self.pw(nn.functional.silu(self.bn(self.dw(x))))
        return self.fc(self.ln(x.transpose(1, 2)))


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    torch.manual_seed(0)
    module = Speech().eval()
    module.bn.running_mean.uniform_(-0.3, 0.3)
    module.bn.running_var.uniform_(0.5, 1.5)
    model, (x,), expected = onnx_model(module, (torch.randn(1, 1, 997),),
                                       tmp_path_factory.mktemp("speech") / "speech.onnx")
    return model, x, expected


def test_every_1d_convolution_is_a_channels_last_row_with_no_copy_between(speech):
    model, _, _ = speech
    prepared = prepare(model.mod)
    ops = op_names(prepared)
    assert "relax.nn.conv1d" not in ops
    # the grouped one (groups of 8) is the grouped rewrite's, as a 2-D one would be
    assert ops.count("relax.nn.conv2d") == 5 and "group_conv" in prepared.script(), ops
    # the model's input (1 channel) and the tail's read are the only layout changes: between
    # the convolutions the activations stay N, 1, W, C, elementwise work and norms included
    assert ops.count("relax.permute_dims") <= 2, ops
    assert ops.count("relax.expand_dims") == 1 and ops.count("relax.squeeze") == 1, ops


def test_the_rewritten_model_matches_pytorch_and_turned_off_keeps_conv1d(speech):
    model, x, expected = speech
    target = default_target(2)
    tasks = extract_tasks(model, target)
    convs = [t for t in tasks if "conv2d" in t.name or "group_conv" in t.name]
    assert len(convs) == 6 and all(t.tunable for t in convs), [t.describe() for t in tasks]
    # the activations after each convolution fuse into it, as in a 2-D network
    assert sum("erf" in t.name or "sigmoid" in t.name or "exp" in t.name for t in convs) >= 3
    compiled = build_model(model, target, {})
    np.testing.assert_allclose(compiled.run(x)[0], expected, rtol=1e-4, atol=1e-4)
    assert "relax.nn.conv1d" in op_names(prepare(model.mod, GraphOptions(conv1d=False)))


def test_old_runs_and_nchw_keep_1d_convolutions(speech):
    model, _, _ = speech
    assert GraphOptions.of({"layout": "nhwc"}).conv1d is False  # saved before the rewrite
    assert "relax.nn.conv1d" in op_names(prepare(model.mod, GraphOptions(layout="nchw")))
