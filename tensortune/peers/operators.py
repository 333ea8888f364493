"""Operator peers, each measured in this process on the same workload as tensortune:

* ``torch_time``: the operator in PyTorch eager (oneDNN / MKL kernels).
* ``metaschedule_tune``: TVM's own auto-scheduler on the same TIR function.
* ``time_tvm_module``: times any compiled TVM kernel (tensortune's or MetaSchedule's) the same
  way, after checking it against the workload's reference.
"""
from __future__ import annotations

import logging
import os
import statistics
import time
from pathlib import Path

import numpy as np

from ..workload import Workload


# -- PyTorch ------------------------------------------------------------------------------------
def _torch_op(workload: Workload):
    import torch
    import torch.nn.functional as F

    op = workload.op
    if op == "matmul":
        return torch.matmul
    if op == "batch_matmul":
        return torch.bmm
    if op == "dense":
        return F.linear  # (x, w[, b]): the same argument order as the workload's inputs
    if op == "conv2d":
        w = workload
        return lambda x, k: F.conv2d(x, k, None, w.stride, w.padding, w.dilation, w.groups)
    raise ValueError(f"no PyTorch peer for operator {op!r}")


def torch_time(workload: Workload, threads: int = 2, repeat: int = 20,
               min_repeat_s: float = 0.02) -> float:
    """Median seconds per call of ``workload`` in PyTorch eager with ``threads`` threads.

    Each repeat times enough back-to-back calls to last ``min_repeat_s``; the result is checked
    against ``workload.reference`` first, so a mis-mapped operator cannot post a fast time.
    """
    import torch

    fn = _torch_op(workload)
    inputs = workload.random_inputs(seed=0)
    args = [torch.from_numpy(a) for a in inputs]
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            out = fn(*args).numpy()
            _check(workload, out, inputs, "PyTorch")
            number = 1
            while True:
                t0 = time.perf_counter()
                for _ in range(number):
                    fn(*args)
                elapsed = time.perf_counter() - t0
                if elapsed >= min_repeat_s:
                    break
                number *= 2
            samples = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                for _ in range(number):
                    fn(*args)
                samples.append((time.perf_counter() - t0) / number)
    finally:
        torch.set_num_threads(saved)
    return statistics.median(samples)


def _check(workload: Workload, out: np.ndarray, inputs, who: str) -> None:
    ref = workload.reference(*inputs)
    scale = max(float(np.abs(ref).max()), 1.0)
    if out.shape != ref.shape or not np.allclose(out, ref, rtol=1e-3, atol=1e-4 * scale):
        err = float(np.abs(out - ref).max()) if out.shape == ref.shape else float("nan")
        raise RuntimeError(f"{who} result of {workload.describe()} differs from the reference "
                           f"(shape {out.shape} vs {ref.shape}, max abs error {err})")


# -- MetaSchedule ------------------------------------------------------------------------------
def _quiet_metaschedule() -> None:
    """Keep MetaSchedule's INFO chatter in work_dir/logs and off stdout.

    ``tune_tir`` reconfigures its loggers on every call, sizing the stdout handler from the level
    of the "tvm.s_tir.meta_schedule" logger at that moment (and then resetting it to DEBUG), so
    this must run right before each call.
    """
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)


def _warm_builder_worker() -> None:
    import tvm.s_tir.tensor_intrin  # noqa: F401


def metaschedule_builder():
    """MetaSchedule's ``LocalBuilder`` with its workers warmed up before their first build.

    Its build function imports ``tvm.s_tir.tensor_intrin``, which parses every tensor intrinsic
    (20-40 s of CPU on a busy 2-core machine). The popen workers count that against the first
    build's 30 s timeout; once one overruns, every replacement worker overruns too and every
    candidate fails to build. An initializer runs outside the timeout.
    """
    from tvm.s_tir import meta_schedule as ms

    return ms.builder.LocalBuilder(initializer=_warm_builder_worker)


def metaschedule_tune(workload: Workload, target: dict, trials: int, work_dir: str | os.PathLike,
                      seed: int | None = None, repeat: int = 10,
                      min_repeat_ms: int = 200) -> tuple[float, float]:
    """Tune ``workload`` with MetaSchedule for ``trials`` trials.

    Returns ``(median seconds per call of the best schedule, wall seconds spent tuning)``.
    The tuned kernel is checked against ``workload.reference`` before it is timed.
    """
    import tvm
    from tvm.s_tir import meta_schedule as ms

    tgt = tvm.target.Target(target)
    func = workload.prim_func()
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    _quiet_metaschedule()
    t0 = time.perf_counter()
    db = ms.tune_tir(mod=func, target=tgt, work_dir=str(work_dir), max_trials_global=trials,
                     num_trials_per_iter=min(64, trials), seed=seed,
                     builder=metaschedule_builder())
    tune_wall = time.perf_counter() - t0
    sch = ms.tir_integration.compile_tir(db, func, tgt)
    if sch is None:
        raise RuntimeError(f"MetaSchedule found no valid schedule for {workload.describe()} "
                           f"in {trials} trials (logs in {work_dir}/logs)")
    module = tvm.compile(sch.mod, target=tgt).jit()
    return time_tvm_module(module, workload, "MetaSchedule", repeat, min_repeat_ms), tune_wall


def time_tvm_module(module, workload: Workload, who: str, repeat: int = 10,
                    min_repeat_ms: int = 200) -> float:
    """Median seconds per call of ``module["main"]``, after checking it against the reference.

    Benchmarks time every TVM kernel (tensortune's and MetaSchedule's) through this one function.
    """
    import tvm

    dev = tvm.cpu()
    inputs = workload.random_inputs(seed=0)
    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    out = tvm.runtime.tensor(np.zeros(workload.output_shape, workload.dtype), dev)
    module["main"](*args, out)
    _check(workload, out.numpy(), inputs, who)
    timer = module.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
    return float(timer(*args, out).median)
