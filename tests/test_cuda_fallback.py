"""The CUDA rule for functions ``cuda.generic``'s tiling does not fit: its spaces, kernels
checked against TVM's unscheduled lowering on the CPU emulator of ``benchmarks/cuda_emulator.py``
(one thread per output), and cross-thread reductions built into sm_90 cubins."""
from __future__ import annotations

import tempfile

import numpy as np
import pytest

from tensortune.measure.cuda_build import build_cuda, launch_spec
from tensortune.space import Config, apply_config, task_space
from tensortune.workload import PrimFuncWorkload, Task

CUDA = {"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}}


def _func(build) -> PrimFuncWorkload:
    from tvm import te

    args = build(te)
    return PrimFuncWorkload.from_prim_func(te.create_prim_func(args), name=build.__name__)


def transpose(te):  # an NCHW input made NHWC, 3 channels
    from tvm import topi

    x = te.placeholder((1, 3, 37, 37), name="x")
    return [x, topi.transpose(x, (0, 2, 3, 1))]


def softmax(te):  # rows of 200: a warp or a block per row
    from tvm import topi

    x = te.placeholder((24, 200), name="x")
    return [x, topi.nn.softmax(x, axis=1)]


def layer_norm(te):  # statistics, then an elementwise normalization
    from tvm import topi

    x = te.placeholder((37, 120), name="x")
    g = te.placeholder((120,), name="g")
    b = te.placeholder((120,), name="b")
    return [x, g, b, topi.nn.layer_norm(x, g, b, axis=[1])]


def pooled_rows(te):  # two reductions (7x7 pooling, then 3 of each 72 channels), a division
    x = te.placeholder((1, 7, 7, 72), name="x")
    i = te.reduce_axis((0, 7), "i")
    j = te.reduce_axis((0, 7), "j")
    s = te.compute((1, 72), lambda n, c: te.sum(x[n, i, j, c], axis=[i, j]), name="s")
    k = te.reduce_axis((0, 3), "k")
    t = te.compute((1, 24), lambda n, c: te.sum(s[n, c * 3 + k], axis=[k]), name="t")
    return [x, te.compute((1, 24), lambda n, c: t[n, c] / 147.0, name="mean")]


def rows_then_total(te):  # row sums, halved, then the sum of all rows: two reductions
    x = te.placeholder((24, 64), name="x")
    k = te.reduce_axis((0, 64), "k")
    s = te.compute((24,), lambda i: te.sum(x[i, k], axis=k), name="s")
    d = te.compute((24,), lambda i: s[i] * 0.5, name="d")
    j = te.reduce_axis((0, 24), "j")
    return [x, te.compute((1,), lambda _: te.sum(d[j], axis=j), name="t")]


def take_by_index(te):  # a ViT's q/k/v split: a gather by a 0-d index
    from tvm import topi

    qkv = te.placeholder((3, 6, 37, 64), name="qkv")
    which = te.placeholder((), dtype="int64", name="which")
    return [qkv, which, topi.take(qkv, which, axis=0)]


def task(build) -> Task:
    return Task(_func(build), CUDA, template="cuda.generic")


def built(t: Task, config: Config):
    """(CUDA source, launch spec) of ``config`` built as tuning builds it (nvcc, sm_90)."""
    import tvm

    sch = apply_config(t, config)
    source = tvm.compile(sch.mod, target=t.tvm_target()).mod.imports[0].inspect_source("cuda")
    with tempfile.TemporaryDirectory() as tmp:
        return source, launch_spec(build_cuda(t, sch, tmp))


def emulated(emulator, t: Task, config: Config):
    source, spec = built(t, config)
    inputs = [np.require(x, requirements="C") for x in t.workload.random_inputs(0)]
    ref = np.asarray(t.workload.reference(*inputs))
    out = np.full(ref.shape, np.nan, np.float32)
    scratch = [np.full(s["shape"], np.nan, s["dtype"]) for s in spec["scratch"]]
    emulator.emulate(source, spec["kernels"], [*inputs, out, *scratch])
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    return spec


def test_functions_without_one_tiled_reduction_get_the_rule_s_knobs():
    assert [k.name for k in task_space(task(transpose)).knobs] == ["threads", "elems", "unroll"]
    soft = {k.name: k for k in task_space(task(softmax)).knobs}
    assert soft["reduce"].options == ("thread", "warp", "block")  # rows of 200: a warp's worth
    assert [k.name for k in task_space(task(layer_norm)).knobs] == [
        "threads", "elems", "reduce", "unroll"]


@pytest.mark.parametrize("config", [
    Config(threads=32, elems=1, unroll=0),
    Config(threads=1024, elems=4, unroll=64),  # 4107 elements: a ragged last block
])
def test_transpose_matches_tvm(emulator, config):
    spec = emulated(emulator, task(transpose), config)
    [kernel] = spec["kernels"]
    assert kernel["block"][0] == config["threads"]


def test_a_gather_by_a_0d_index_keeps_its_index_0d(emulator):
    """``np.ascontiguousarray`` makes a 0-d array 1-d, which TVM refuses for a 0-d buffer:
    the reference, the batch's data and the emulated run all take it as it is."""
    t = task(take_by_index)
    assert t.workload.random_inputs(0)[1].shape == ()
    emulated(emulator, t, Config(threads=128, elems=2, unroll=0))


@pytest.mark.parametrize("build, elems", [(layer_norm, 1), (layer_norm, 4), (softmax, 2),
                                          (pooled_rows, 1)])
def test_one_thread_per_row_matches_tvm(emulator, build, elems):
    emulated(emulator, task(build), Config(threads=64, elems=elems, reduce="thread", unroll=16))


def test_a_division_joins_its_sum_s_kernel(emulator):
    spec = emulated(emulator, task(pooled_rows), Config(threads=32, elems=1, reduce="thread",
                                                        unroll=0))
    # the 7x7 sums, then the sums of three written back divided: two kernels, one scratch
    assert len(spec["kernels"]) == 2 and len(spec["scratch"]) == 1


@pytest.mark.parametrize("reduce", ["warp", "block"])
def test_a_reduction_of_all_rows_is_a_kernel_of_its_own(emulator, reduce):
    """The total needs every block's rows: it is not pulled into the rows' kernel."""
    from tensortune.space.cuda_template import device_functions, lower_for_cuda

    t = task(rows_then_total)
    sch = apply_config(t, Config(threads=128, elems=1, reduce=reduce, unroll=0))
    assert len(device_functions(lower_for_cuda(sch.mod))) == 2
    emulated(emulator, t, Config(threads=128, elems=1, reduce="thread", unroll=0))


@pytest.mark.parametrize("reduce", ["warp", "block"])
def test_cross_thread_rows_build_sm90_cubins(reduce):
    source, spec = built(task(softmax), Config(threads=128, elems=1, reduce=reduce, unroll=16))
    assert "__shfl" in source  # TVM's warp-level sum and maximum
    shapes = {tuple(k["block"]) for k in spec["kernels"]}
    assert (32, 4, 1) in shapes if reduce == "warp" else (128, 1, 1) in shapes


def test_every_function_of_a_cuda_model_that_runs_a_kernel_is_a_tunable_task(tmp_path):
    """Layout changes, Winograd's input transform and pooling included: none is left to dlight."""
    import torch

    from tensortune.session import Session
    from tensortune.settings import Settings
    from tensortune.workload import parse_target

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 24, 3, padding=1)
            self.body = torch.nn.Conv2d(24, 24, 3, padding=1)  # Winograd-sized
            self.fc = torch.nn.Linear(24, 10)

        def forward(self, x):
            y = torch.relu(self.body(torch.relu(self.stem(x))))
            return self.fc(torch.nn.functional.max_pool2d(y, 2).mean(dim=(2, 3)))

    settings = Settings(home=tmp_path, target=parse_target("cuda:sm_90"))
    session = Session.from_torch(Net().eval(), (torch.randn(1, 3, 37, 37),), settings=settings)
    tasks = session.extract()
    left = [t.describe() for t in tasks if not t.tunable and "a reshape" not in t.reason]
    assert not left
    names = " ".join(t.name for t in tasks)
    assert "transpose" in names and "max_pool2d" in names
