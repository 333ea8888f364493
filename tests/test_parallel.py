"""Parallel loops whose chunks the threads take as they go (``tensortune.parallel``): every
iteration runs once, scheduled kernels (an accumulator allocated per chunk, a packed weight,
irregular shapes) compute what numpy does, and the static switch gives TVM's own split."""
import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from tensortune import parallel
from tensortune.measure import LocalBuilder, LocalRunner, MeasureInput
from tensortune.settings import MeasureSettings
from tensortune.space import task_seeds, task_space
from tensortune.workload import Conv2d, Matmul, Task, default_target


@T.prim_func
def add_one(out: T.Buffer((1000,), "int32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    for i in T.parallel(1000):
        out[i] = out[i] + 1


def _library(pipeline: str):
    return tvm.compile(tvm.IRModule({"main": add_one}), target={"kind": "llvm"},
                       tir_pipeline=pipeline)


def test_every_iteration_of_a_parallel_loop_runs_exactly_once():
    lib = _library(parallel.tir_pipeline())
    assert "atomicrmw add" in lib.mod.inspect_source("ll")  # the counter, not TVM's split
    out = tvm.runtime.tensor(np.zeros(1000, "int32"))
    for _ in range(50):
        lib["main"](out)
    assert (out.numpy() == 50).all()


def test_the_static_switch_gives_tvms_own_split(monkeypatch):
    monkeypatch.setenv(parallel.STATIC, "1")
    assert parallel.tir_pipeline() == "default"
    assert "atomicrmw" not in _library(parallel.tir_pipeline()).mod.inspect_source("ll")
    monkeypatch.setenv(parallel.STATIC, "0")
    assert parallel.tir_pipeline() == parallel.PIPELINE


@pytest.mark.parametrize("workload", [
    Matmul(m=37, n=200, k=72),  # rows padded to 40; each chunk allocates its accumulator
    Conv2d(c=3, h=37, w=37, filters=24, kh=3, kw=3, padding=1),
])
def test_scheduled_kernels_on_irregular_shapes_compute_what_numpy_does(workload):
    task = Task(workload, default_target(2))
    seeds = task_seeds(task, task_space(task))[:3]
    assert any(c["outer"].startswith("S1") for c in seeds)  # a write-back inside the chunk
    inputs = [MeasureInput(task, c) for c in seeds]
    settings = MeasureSettings(number=2, repeat=1, min_repeat_ms=1, threads=2)
    with LocalBuilder(workers=2) as builder, LocalRunner(settings) as runner:
        results = runner.run(inputs, builder.build(inputs))
    for inp, result in zip(inputs, results):
        assert result.ok and result.verified, (dict(inp.config), result.message)
