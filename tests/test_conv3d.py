"""3-D convolutions channels-last (``tasks.layout``: NDHWC beside NHWC): a video network's
layers through ONNX, transposed 3-D convolutions (kernel = stride: a 1x1x1 convolution and a
reshuffle; any other: NCDHW, TOPI's only layout), and the build."""
import numpy as np
import pytest
import torch

from tensortune.space import task_space
from tensortune.tasks import build_model, extract_tasks
from tensortune.tasks.extract import prepare
from tensortune.tasks.graph import GraphOptions
from tensortune.workload import default_target

from .graph_checks import onnx_model, op_calls

nn = torch.nn


class Video(nn.Module):
    """Irregular shapes: a 3-channel strided stem on 4 frames of 19x19, an R(2+1)D pair (1x3x3
    then 3x1x1) to 40 channels and back to 24, a depthwise and a grouped 3x3x3 convolution,
    batch norm, an instance norm and LeakyReLU (a 3-D U-Net's, with its kernel = stride
    transposed convolution), a 3-D max pool, a padded 3x3x3 transposed one, a pooled head."""

    def __init__(self, c=24):
        super().__init__()
        self.stem = nn.Conv3d(3, c, (3, 5, 5), (1, 2, 2), (1, 2, 2))
        self.bn = nn.BatchNorm3d(c)
        self.spatial = nn.Conv3d(c, 40, (1, 3, 3), padding=(0, 1, 1))
        self.temporal = nn.Conv3d(40, c, (3, 1, 1), padding=(1, 0, 0))
        self.dw = nn.Conv3d(c, c, 3, padding=1, groups=c)
        self.grouped = nn.Conv3d(c, c, 3, padding=1, groups=3)
        self.inorm = nn.InstanceNorm3d(c, affine=True)
        self.pool = nn.MaxPool3d((1, 2, 2))
        self.up = nn.ConvTranspose3d(c, c, (1, 2, 2), (1, 2, 2))
        self.up3 = nn.ConvTranspose3d(c, c, 3, (1, 2, 2), 1, output_padding=(0, 1, 1))
        self.fc = nn.Linear(c, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.stem(x)))
        x = x + self.temporal(torch.relu(self.spatial(x)))
        x = nn.functional.leaky_relu(self.inorm(self.grouped(self.dw(x))), 0.01)
        x = self.up3(self.up(self.pool(x)))
        return self.fc(nn.functional.adaptive_avg_pool3d(x, 1).flatten(1))


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    torch.manual_seed(0)
    module = Video().eval()
    module.bn.running_mean.uniform_(-0.3, 0.3)
    module.bn.running_var.uniform_(0.5, 1.5)
    with torch.no_grad():
        module.inorm.weight.uniform_(0.5, 1.5)
        module.inorm.bias.uniform_(-0.5, 0.5)
    model, (x,), expected = onnx_model(module, (torch.randn(1, 3, 4, 19, 19),),
                                       tmp_path_factory.mktemp("video") / "video.onnx")
    return model, x, expected


def test_every_3d_convolution_is_channels_last_and_the_transposed_one_ncdhw(video):
    model, _, _ = video
    calls = op_calls(prepare(model.mod))
    convs = [c for c in calls if c.op.name == "relax.nn.conv3d"]
    # five of the model's and the kernel = stride transposed one's 1x1x1
    assert len(convs) == 6 and all(str(c.attrs.data_layout) == "NDHWC" for c in convs)
    assert [tuple(int(c.args[1].ty.shape[i]) for i in range(3)) for c in convs].count((1, 1, 1)) == 1
    # TOPI's one rule for a transposed 3-D convolution takes NCDHW: the padded one gets its own
    # pair of transposes; besides, the input's, the head's and the reshuffle's
    transposed = [c for c in calls if c.op.name == "relax.nn.conv3d_transpose"]
    assert [str(c.attrs.data_layout) for c in transposed] == ["NCDHW"]
    assert sum(c.op.name == "relax.permute_dims" for c in calls) <= 5
    kept = op_calls(prepare(model.mod, GraphOptions(layout="nchw")))
    assert all(str(c.attrs.data_layout) == "NCDHW" for c in kept if c.op.name == "relax.nn.conv3d")


def test_the_channels_last_video_network_is_tiled_and_matches_pytorch(video):
    model, x, expected = video
    target = default_target(2)
    tasks = extract_tasks(model, target)
    convs = [t for t in tasks if "conv3d" in t.name and "transpose" not in t.name]
    assert len(convs) == 6 and all(t.tunable for t in convs), [t.describe() for t in tasks]
    # the generic template tiles them, its vector axis among the output channels
    for t in convs:
        knobs = {k.name: k for k in task_space(t.task).knobs}
        assert any(name.startswith("tile_") for name in knobs), t.name
    compiled = build_model(model, target, {})
    np.testing.assert_allclose(compiled.run(x)[0], expected, rtol=1e-4, atol=1e-5)
    assert compiled.default_functions() == []
