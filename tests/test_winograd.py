"""Winograd F(m, 3) for 3x3 stride-1 convolutions, and the graph options that choose it."""
import numpy as np
import pytest
import torch

from tensortune.frontend import from_torch
from tensortune.tasks import build_model, extract_tasks
from tensortune.tasks.graph import GraphOptions
from tensortune.tasks.winograd import _matrices, choose_tile, transform_weight
from tensortune.workload import default_target


@pytest.mark.parametrize("tile", [2, 4])
def test_winograd_matrices_compute_a_3x3_correlation(tile):
    """One output tile by Y = A^T [(G g G^T) * (B^T d B)] A equals the direct correlation."""
    a, b, g = _matrices(tile)
    rng = np.random.default_rng(0)
    alpha = tile + 2
    d = rng.standard_normal((alpha, alpha))
    w = rng.standard_normal((3, 3))
    direct = np.array([[np.sum(d[i:i + 3, j:j + 3] * w) for j in range(tile)]
                       for i in range(tile)])
    winograd = a.T @ ((g @ w @ g.T) * (b.T @ d @ b)) @ a
    np.testing.assert_allclose(winograd, direct, rtol=1e-9, atol=1e-9)
    u = transform_weight(w.reshape(3, 3, 1, 1).astype("float32"), tile)
    assert u.shape == (alpha * alpha, 1, 1)
    np.testing.assert_allclose(u[:, 0, 0].reshape(alpha, alpha), g @ w @ g.T, rtol=1e-5,
                               atol=1e-5)


def test_tile_choice_keeps_the_gemms_tall_and_the_weights_reused():
    assert choose_tile(56, 56) == 4 and choose_tile(28, 28) == 4
    assert choose_tile(14, 14) == 2  # 4x4 tiles would leave 16 uses of each weight
    assert choose_tile(7, 7) is None and choose_tile(3, 3) is None  # direct
    assert choose_tile(7, 7, batch=4) == 2  # the batch's tiles share the weights


class Convs(torch.nn.Module):
    """Eligible 3x3 convolutions (40 -> 40 with a residual, on 13x13 and 7x7) beside ones that
    are not: the 3-channel stem, a stride-2 one, a 1x1 and a depthwise one."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 40, 3, padding=1)
        self.same = torch.nn.Conv2d(40, 40, 3, padding=1)
        self.down = torch.nn.Conv2d(40, 40, 3, stride=2, padding=1)
        self.dw = torch.nn.Conv2d(40, 40, 3, padding=1, groups=40)
        self.point = torch.nn.Conv2d(40, 48, 1)
        self.late = torch.nn.Conv2d(48, 48, 3, padding=1)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = torch.relu(self.same(x) + x)
        x = self.point(torch.relu(self.dw(self.down(x))))
        return torch.relu(self.late(x))


@pytest.fixture(scope="module")
def convs():
    torch.manual_seed(0)
    module = Convs().eval()
    x = torch.randn(1, 3, 13, 13)
    with torch.no_grad():
        expected = module(x).numpy()
    return from_torch(module, (x,)), x.numpy(), expected


def test_only_eligible_convolutions_become_winograd_and_the_model_still_matches(convs):
    model, x, expected = convs
    target = default_target(2)
    tasks = extract_tasks(model, target)
    names = [t.name for t in tasks]
    # the 13x13 one; the 7x7 one has too few tiles to reuse its weights and stays direct
    assert sum("winograd_input" in n for n in names) == 1, names
    assert sum("winograd_output" in n for n in names) == 1
    assert sum(n.startswith("fused_conv2d") or n.startswith("conv2d") for n in names) == 5
    # the residual add and the relu run in the output transform, not on their own
    assert any("winograd_output" in n and "add" in n and "relu" in n for n in names)
    assert all(t.tunable for t in tasks if "winograd" in t.name or "matmul" in t.name)
    compiled = build_model(model, target)
    np.testing.assert_allclose(compiled.run(x)[0], expected, rtol=1e-4, atol=1e-4)
    direct = extract_tasks(model, target, graph=GraphOptions(winograd=False))
    assert not any("winograd" in t.name for t in direct)


@pytest.mark.parametrize("size, first", [(21, "root"), (24, "inline")])
def test_the_output_transforms_table_is_made_up_front_first_where_its_rows_do_not_fold(size,
                                                                                    first):
    """The output transform reads Winograd's ``A`` (6 x 4), a chain of selects on ``y % 4``:
    inlined, it folds to constants where the rows are multiples of 4 (24: the seeds inline it
    first, as before) and runs per multiply-add where they are not (21; Inception's 147x147
    output transform took 5-22 ms so, 1.1-2.5 ms with the table made up front, inlining
    kept among the later seeds). The first seed builds and matches numpy."""
    from tensortune.measure import LocalBuilder, LocalRunner, MeasureInput
    from tensortune.settings import MeasureSettings
    from tensortune.space import task_seeds

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(32, 32, 3, padding=1).eval()
    model = from_torch(conv, (torch.randn(1, 32, size, size),))
    [out] = [t.task for t in extract_tasks(model, default_target(2))
             if "winograd_output" in t.name]
    seeds = task_seeds(out)
    assert seeds[0]["producer_at"] == first
    if first == "root":  # inlining stays among the seeds
        assert any(c["producer_at"] == "inline" for c in seeds)
    settings = MeasureSettings(number=1, repeat=1, min_repeat_ms=1, threads=2)
    inputs = [MeasureInput(out, seeds[0])]
    with LocalBuilder(workers=1) as builder, LocalRunner(settings) as runner:
        [result] = runner.run(inputs, builder.build(inputs))
    assert result.ok and result.verified, result.message


def test_graph_options_are_a_checked_value():
    assert GraphOptions.of(None) == GraphOptions()
    assert GraphOptions.of("NCHW") == GraphOptions(layout="nchw")
    options = GraphOptions(winograd=False, winograd_channels=64)
    assert GraphOptions.of(options.to_json()) == options
    # a spec saved before the expand-depthwise fusion existed means no fusion
    assert GraphOptions.of({"layout": "nhwc"}).expand_depthwise is False
    with pytest.raises(ValueError, match="expand_depthwise_kib"):
        GraphOptions(expand_depthwise_kib=-1)
    with pytest.raises(ValueError, match="unknown graph option.*'tile'"):
        GraphOptions.of({"tile": 4})
    with pytest.raises(ValueError, match="unknown layout"):
        GraphOptions(layout="nc4hw")
    with pytest.raises(TypeError, match="not int"):
        GraphOptions.of(3)
