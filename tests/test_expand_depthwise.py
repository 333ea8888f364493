"""Expand-then-depthwise fusion: the graph rewrite, its template, and models that still match."""
import numpy as np
import pytest
import torch

from tensortune.frontend import from_torch
from tensortune.space import task_seeds, task_space
from tensortune.tasks import build_model, extract_tasks
from tensortune.tasks.graph import GraphOptions
from tensortune.workload import default_target

from .template_checks import matching_configs

FUSE_ALL = GraphOptions(expand_depthwise_kib=0)


class Inverted(torch.nn.Module):
    """Two inverted residual blocks on irregular shapes (8 -> 24 channels on 37x37, 3x3 at
    stride 1 with a residual; 8 -> 72, 5x5 at stride 2 with ReLU instead of ReLU6), then a 1x1
    whose output also feeds an add, which must not be fused (its expanded tensor has two
    uses)."""

    def __init__(self):
        super().__init__()

        def block(cin, cout, stride, act, k=3):
            return torch.nn.Sequential(
                torch.nn.Conv2d(cin, cout, 1, bias=False), torch.nn.BatchNorm2d(cout), act(),
                torch.nn.Conv2d(cout, cout, k, stride, k // 2, groups=cout, bias=False),
                torch.nn.BatchNorm2d(cout), act())

        self.a = block(8, 24, 1, torch.nn.ReLU6)
        self.back = torch.nn.Conv2d(24, 8, 1)
        self.b = block(8, 72, 2, torch.nn.ReLU, k=5)
        self.c_point = torch.nn.Conv2d(72, 72, 1)
        self.c_dw = torch.nn.Conv2d(72, 72, 3, padding=1, groups=72)

    def forward(self, x):
        x = x + self.back(self.a(x))
        x = self.b(x)
        y = torch.relu(self.c_point(x))
        return self.c_dw(y) + y


@pytest.fixture(scope="module")
def inverted():
    torch.manual_seed(0)
    module = Inverted().eval()
    for m in module.modules():  # non-trivial batch-norm statistics, so folding them is checked
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
    x = torch.randn(1, 8, 37, 37)
    with torch.no_grad():
        expected = module(x).numpy()
    return from_torch(module, (x,)), x.numpy(), expected


def test_eligible_pairs_fuse_and_the_model_still_matches(inverted):
    model, x, expected = inverted
    target = default_target(2)
    tasks = extract_tasks(model, target, graph=FUSE_ALL)
    fused = [t for t in tasks if "expand_depthwise" in t.name]
    # blocks a and b fuse; c's pointwise output is also read by the residual add
    assert len(fused) == 2, [t.name for t in tasks]
    assert all(t.tunable for t in fused)
    # the depthwise bias and activation ride along (FuseOps puts them in the same function)
    assert all("add" in t.name for t in fused)
    best = {}
    for t in fused:
        seeds = task_seeds(t.task)
        assert seeds, t.name
        best[t.key] = seeds[0]
    compiled = build_model(model, target, best, graph=FUSE_ALL)
    # the others are built with their own template's seed (build_model's fallback)
    assert {n for t in fused for n in t.functions} <= set(compiled.tuned)
    np.testing.assert_allclose(compiled.run(x)[0], expected, rtol=1e-4, atol=1e-4)


def test_small_expansions_stay_separate_by_default(inverted):
    model, _, _ = inverted
    names = [t.name for t in extract_tasks(model, default_target(2))]
    assert not any("expand_depthwise" in n for n in names)  # 37x37x72 floats < 1 MiB
    names = [t.name for t in extract_tasks(model, default_target(2),
                                           graph=GraphOptions(expand_depthwise=False,
                                                              expand_depthwise_kib=0))]
    assert not any("expand_depthwise" in n for n in names)


def test_every_seed_and_sampled_config_computes_the_same_result(inverted):
    """The template on 24 channels (three 8-lane vectors), 3x3 at stride 1, and 72, 5x5 at
    stride 2:
    seeds and random configs either refuse with ``InvalidConfigError`` or match the
    unscheduled function."""
    model, _, _ = inverted
    target = default_target(2)
    fused = [t for t in extract_tasks(model, target, graph=FUSE_ALL)
             if "expand_depthwise" in t.name]
    rng = np.random.default_rng(0)
    for t in fused:
        space = task_space(t.task)
        assert {k.name for k in space.knobs} == {"rows", "channels", "dw_cols", "pw_cols", "pad",
                                                 "unroll"}
        configs = task_seeds(t.task, space) + space.sample_many(4, rng)
        assert len(matching_configs(t.task, space, configs, atol=1e-4)) >= 3, t.name
