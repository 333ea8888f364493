"""Grouped convolutions with few channels per group: the rewrite, its seeds, and the models."""
import numpy as np
import pytest
import torch

from tensortune.frontend import from_torch
from tensortune.space import apply_config, task_seeds, task_space
from tensortune.space.analysis import analyze
from tensortune.tasks import build_model, extract_tasks
from tensortune.tasks.graph import GraphOptions
from tensortune.workload import default_target


class Grouped(torch.nn.Module):
    """Irregular shapes: a 3-channel stem, groups of 4 on 45x45 (24 channels; computed 48 wide
    and cropped), a stride-2 grouped convolution with 4 inputs and 6 outputs per group to a
    23-wide row (not padded: 32 would be too many), groups of 16 outputs (left alone: the
    channel axis vectorizes), a depthwise convolution (not grouped in this sense), and grouped
    rows too short to vectorize along (12 wide). Fewer than 8 outputs a group: rewritten for
    AVX2 and AVX-512 hosts alike."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 24, 3, padding=1)
        self.g4 = torch.nn.Conv2d(24, 24, 3, padding=1, groups=6)
        self.bn = torch.nn.BatchNorm2d(24)
        self.g_stride = torch.nn.Conv2d(24, 36, 3, stride=2, padding=1, groups=6)
        self.g16 = torch.nn.Conv2d(36, 48, 3, padding=1, groups=3)
        self.dw = torch.nn.Conv2d(48, 48, 3, padding=1, groups=48)
        self.short = torch.nn.Conv2d(48, 48, 3, stride=2, padding=1, groups=12)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = torch.relu(self.bn(self.g4(x))) + x
        x = torch.nn.functional.silu(self.g_stride(x))
        x = self.dw(torch.relu(self.g16(x)))
        return self.short(x)


@pytest.fixture(scope="module")
def grouped():
    torch.manual_seed(0)
    module = Grouped().eval()
    module.bn.running_mean.uniform_(-0.5, 0.5)
    module.bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(1, 3, 45, 45)
    with torch.no_grad():
        expected = module(x).numpy()
    return from_torch(module, (x,)), x.numpy(), expected


def _conv_tasks(tasks):
    return [t for t in tasks if "group_conv" in t.name]


def test_narrow_groups_are_rewritten_and_the_model_matches(grouped):
    model, x, expected = grouped
    target = default_target(2)
    tasks = extract_tasks(model, target)
    convs = _conv_tasks(tasks)
    # groups of 4 and of 6 outputs on rows of 45 and 23; not the groups of 16, the depthwise
    # convolution or the 12-wide row
    assert len(convs) == 2, [t.name for t in tasks]
    assert len([t for t in tasks if "group_pack" in t.name]) == 2
    assert all(t.tunable for t in tasks), [(t.name, t.reason) for t in tasks if not t.tunable]
    # the bias, batch norm and activation still fuse into the convolution (and its crop)
    assert all("add" in t.name for t in convs), [t.name for t in convs]
    scripts = [t.task.workload.prim_func().script() for t in convs]
    assert sum("tt_group_crop" in s for s in scripts) == 1
    best = {}
    for t in convs:
        seeds = task_seeds(t.task)
        assert seeds and all(s["vector_axis"] == "ox" for s in seeds), t.name
        best[t.key] = seeds[0]
    compiled = build_model(model, target, best)
    assert {n for t in convs for n in t.functions} <= set(compiled.tuned)
    np.testing.assert_allclose(compiled.run(x)[0], expected, rtol=1e-4, atol=1e-4)


def test_seeds_of_the_strided_convolution_compute_it(grouped):
    """Seeds with other tiles and packings are valid schedules of the packed form, and the
    model built with them matches."""
    import tvm

    model, x, expected = grouped
    target = default_target(2)
    tasks = extract_tasks(model, target)
    strided = next(t for t in _conv_tasks(tasks) if "exp" in t.name)
    info = analyze(tvm.s_tir.Schedule(strided.task.workload.prim_func()))
    assert info.vector_axis == "v_ox"
    space = task_space(strided.task)
    seeds = task_seeds(strided.task, space)
    assert len({(s["tile_ox"], s["tile_co"]) for s in seeds}) > 1
    for config in seeds[1:3]:
        apply_config(strided.task, config, space)
        compiled = build_model(model, target, {strided.key: config})
        np.testing.assert_allclose(compiled.run(x)[0], expected, rtol=1e-4, atol=1e-4)


def test_turned_off_the_model_keeps_topi_grouped_convolutions(grouped):
    model, x, expected = grouped
    target = default_target(2)
    off = GraphOptions(grouped_conv=False)
    tasks = extract_tasks(model, target, graph=off)
    assert not _conv_tasks(tasks)
    # a run saved before the rewrite existed is rebuilt without it
    assert GraphOptions.of({"layout": "nhwc"}).grouped_conv is False
    compiled = build_model(model, target, {}, graph=off)
    np.testing.assert_allclose(compiled.run(x)[0], expected, rtol=1e-4, atol=1e-4)


def test_a_14_wide_row_is_computed_16_wide_and_cropped():
    """A 14x14 stage at an irregular width: 40 channels in groups of 4 on a 14x14 image are
    computed over 16 columns (one AVX-512 vector a row) and cropped; a stride-2 one to 7
    columns is left in TOPI's form (16 would more than double the work)."""
    torch.manual_seed(1)
    module = torch.nn.Sequential(torch.nn.Conv2d(40, 40, 3, padding=1, groups=10),
                                 torch.nn.ReLU(),
                                 torch.nn.Conv2d(40, 40, 3, stride=2, padding=1, groups=10)).eval()
    x = torch.randn(1, 40, 14, 14)
    with torch.no_grad():
        expected = module(x).numpy()
    model = from_torch(module, (x,))
    target = default_target(2)
    tasks = extract_tasks(model, target)
    convs = _conv_tasks(tasks)
    assert len(convs) == 1, [t.name for t in tasks]
    func = convs[0].task.workload.prim_func()
    assert "tt_group_crop" in func.script()
    # the convolution's own buffer is 16 columns wide, its crop 14
    assert "(T.int64(1), T.int64(14), T.int64(16), T.int64(40))" in func.script()
    best = {convs[0].key: task_seeds(convs[0].task)[0]}
    compiled = build_model(model, target, best)
    np.testing.assert_allclose(compiled.run(x.numpy())[0], expected, rtol=1e-4, atol=1e-4)


def test_groups_of_a_whole_avx2_vector_stay_in_topi_form_there():
    """RegNet's groups of 8 outputs (48 channels, stride 2 at 37x37): packed for an AVX-512
    target, whose 16 lanes would span two groups; left in TOPI's form for an AVX2 one, where
    8 lanes are one group and the seeds keep the tile inside it. Built for this host in TOPI's
    form with its seeds, the model matches."""
    torch.manual_seed(2)
    module = torch.nn.Sequential(torch.nn.Conv2d(48, 48, 3, stride=2, padding=1, groups=6),
                                 torch.nn.ReLU()).eval()
    x = torch.randn(1, 48, 37, 37)
    with torch.no_grad():
        expected = module(x).numpy()
    model = from_torch(module, (x,))
    avx512 = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}
    avx2 = {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}
    assert len(_conv_tasks(extract_tasks(model, avx512))) == 1
    topi = extract_tasks(model, avx2)
    assert not _conv_tasks(topi) and not [t for t in topi if "group_pack" in t.name]
    target = default_target(2)
    tasks = extract_tasks(model, target, graph=GraphOptions(grouped_conv=False))
    conv = next(t for t in tasks if "conv2d" in t.name)
    seeds = task_seeds(conv.task)
    assert seeds and all(s["vector_axis"] == "ff" and 8 % s["tile_ff"][-1] == 0 for s in seeds)
    compiled = build_model(model, target, {conv.key: seeds[0]},
                           graph=GraphOptions(grouped_conv=False))
    np.testing.assert_allclose(compiled.run(x.numpy())[0], expected, rtol=1e-4, atol=1e-4)
