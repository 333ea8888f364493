"""The generic CPU template: every config builds and matches numpy, or is an invalid config."""
import numpy as np
import pytest
import tvm

from tensortune.space import InvalidConfigError, apply_config, task_space
from tensortune.workload import BatchMatmul, Conv2d, Dense, Matmul, Task, default_target
from tests.template_checks import matching_configs

SHAPES = [
    Matmul(m=16, n=32, k=8),
    Dense(batch=4, in_features=16, out_features=24, bias=True),
    BatchMatmul(b=2, m=8, n=16, k=4),
    Conv2d(n=1, c=4, h=6, w=6, filters=8, kh=3, kw=3, stride=1, padding=1),
    Conv2d(n=1, c=4, h=7, w=7, filters=4, kh=3, kw=3, stride=2, padding=1, groups=4),  # depthwise
    Conv2d(n=1, c=24, h=5, w=5, filters=40, kh=1, kw=1),  # weights larger than activations
]


def _configs(space, rng, n):
    """Random configs plus, for every knob, one config per candidate value (coverage)."""
    out = space.sample_many(n, rng)
    for knob, radix in zip(space.knobs, space.radices):
        for d in range(min(radix, 6)):
            digits = list(space.digits(space.sample(rng)))
            digits[space.knobs.index(knob)] = d if radix <= 6 else int(rng.integers(radix))
            out.append(space.from_digits(digits))
    return out


@pytest.mark.parametrize("workload", SHAPES, ids=lambda w: w.describe())
def test_every_config_builds_and_matches_numpy_or_is_invalid(workload):
    task = Task(workload, default_target())
    space = task_space(task)
    rng = np.random.default_rng(0)
    inputs = workload.random_inputs(1)
    expected = workload.reference(*inputs)
    dev = tvm.cpu()
    built = invalid = 0
    for cfg in _configs(space, rng, 10):
        try:
            sch = apply_config(task, cfg, space)
        except InvalidConfigError:
            invalid += 1
            continue
        mod = tvm.compile(sch.mod, target=task.tvm_target()).jit()
        args = [tvm.runtime.tensor(a, dev) for a in inputs]
        out = tvm.runtime.tensor(np.zeros(workload.output_shape, workload.dtype), dev)
        mod["main"](*args, out)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4, err_msg=str(cfg))
        built += 1
    assert built >= 10, f"only {built} configs built ({invalid} invalid)"


def test_space_is_large_and_has_the_documented_knobs():
    space = task_space(Task(Conv2d(n=1, c=8, h=8, w=8, filters=16, kh=3, kw=3, padding=1),
                            default_target()))
    names = {k.name for k in space.knobs}
    assert {"tile_f", "tile_x", "tile_rc", "vector_axis", "outer", "producer_at",
            "pack_weight", "unroll"} <= names
    assert [k for k in space.knobs if k.name == "tile_f"][0].parts == 4
    assert [k for k in space.knobs if k.name == "tile_rc"][0].parts == 2
    assert len(space) > 10**5


def test_foreign_config_is_an_invalid_config_error():
    task = Task(Matmul(m=8, n=8, k=8), default_target())
    space = task_space(task)
    cfg = dict(space.get(0))
    cfg["tile_i"] = (3, 1, 1, 1)
    from tensortune.space import Config
    with pytest.raises(InvalidConfigError, match="tile_i"):
        apply_config(task, Config(cfg), space)


def test_functions_without_one_tiled_reduction_get_the_row_wise_space():
    from tvm import te
    from tvm.s_tir import Schedule
    from tensortune.space import SpaceBuilder, generic_cpu

    a = te.placeholder((8, 16), name="a")
    b = te.compute((8, 16), lambda i, j: a[i, j] + 1, name="b")
    builder = SpaceBuilder()
    generic_cpu(builder, Schedule(te.create_prim_func([a, b])))
    assert [k.name for k in builder.knobs] == ["rows", "vector", "parallel", "unroll"]
    assert builder.knobs[0].options == (2, 1)  # fuse both loops, or parallelize the rows only
    # a softmax over a whole vector has no row to give each core: every block on its own
    # first (the rule that fits any function), or the output's one axis apart from the rest
    k1, k2 = te.reduce_axis((0, 16), "k1"), te.reduce_axis((0, 16), "k2")
    v = te.placeholder((16,), name="v")
    peak = te.compute((), lambda: te.max(v[k1], axis=k1), name="peak")
    e = te.compute((16,), lambda i: te.exp(v[i] - peak()), name="e")
    total = te.compute((), lambda: te.sum(e[k2], axis=k2), name="total")
    out = te.compute((16,), lambda i: e[i] / total(), name="out")
    builder = SpaceBuilder()
    generic_cpu(builder, Schedule(te.create_prim_func([v, out])))
    knobs = {k.name: k.options for k in builder.knobs}
    assert knobs["rows"] == (0, 1) and knobs["reduce"] == ("rfactor", "unroll")


def test_chunks_follow_the_weights_where_they_are_the_larger_operand():
    """A late layer (few rows, more weights than a core's L2 keeps): the parallel chunks run
    along the weights' columns first, so each core reads its share of the weights once; a
    layer with more activations than weights keeps the rows outermost. Both compute what numpy
    does."""
    from tensortune.space import Config

    for workload, first in ((Dense(batch=14, in_features=512, out_features=768), "j"),
                            (Dense(batch=96, in_features=512, out_features=14), "i")):
        task = Task(workload, default_target())
        space = task_space(task)
        n, m = workload.out_features, workload.batch
        j = (2, 1, 12, 32) if n == 768 else (2, 1, 1, n // 2)
        config = Config({"tile_i": (2, 1, 1, m // 2), "tile_j": j,
                         "tile_k": (1, 512), "vector_axis": "j",
                         "outer": "S1/1", "pack_X": "none", "pack_W": "root", "unroll": 16})
        assert config in space
        sch = apply_config(task, config, space)
        fused = [ln for ln in sch.mod.script().splitlines() if "T.parallel" in ln][-1]
        assert fused.split("for ")[1].startswith(first + "_0_"), fused
        inputs = workload.random_inputs(2)
        mod = tvm.compile(sch.mod, target=task.tvm_target()).jit()
        args = [tvm.runtime.tensor(a) for a in inputs]
        out = tvm.runtime.tensor(np.zeros(workload.output_shape, "float32"))
        mod["main"](*args, out)
        np.testing.assert_allclose(out.numpy(), workload.reference(*inputs), rtol=1e-4,
                                   atol=1e-4)


def test_copies_made_up_front_are_vectorized_in_pieces_llvm_compiles_quickly():
    """A padded copy made at the root along 200 channels (NHWC, a stride-2 3x3 layer of a
    model) is vectorized 50 lanes at a time, never as one ``<200 x float>`` (a 512-lane copy
    took LLVM 5-7 s to compile, past the build limit, where 64-lane pieces took 0.2 s), and
    the function still computes what its reference does."""
    import re

    import torch

    from tensortune.frontend import from_torch
    from tensortune.space.cpu_template import VECTOR_MAX
    from tensortune.tasks import extract_tasks

    torch.manual_seed(0)
    layer = torch.nn.Conv2d(200, 24, 3, stride=2, padding=1)
    model = from_torch(layer.eval(), (torch.randn(1, 200, 9, 9),))
    (task,) = [t.task for t in extract_tasks(model, default_target(2)) if "conv2d" in t.name]
    space = task_space(task)
    config = next(c for c in space.sample_many(200, np.random.default_rng(0))
                  if dict(c)["producer_at"] == "root")
    sch = apply_config(task, config, space)
    script = sch.mod.script()
    lanes = [int(n) for n in re.findall(r"T\.vectorized\(T\.int64\((\d+)\)\)", script)]
    assert lanes and max(lanes) <= VECTOR_MAX, lanes
    assert "T.vectorized(T.int64(50))" in script  # the pad's 200 channels, 4 x 50
    assert matching_configs(task, space, [config], atol=1e-4) == [config]
