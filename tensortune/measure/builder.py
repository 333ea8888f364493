"""``LocalBuilder``: schedule and compile candidates to shared libraries in worker processes."""
from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence

from .link import fast_link
from .pool import CRASHED, TIMEOUT, JobFailure, WorkerPool, first_line, pin_and_init
from .types import BuildResult, ErrorKind, MeasureInput

# a batch's time limit per build: seconds, or a function of the build times seen so far
BuildDeadline = float | Callable[[Sequence[float]], float]


def task_job(task, tir: bool = False) -> dict:
    """A task as plain data that a worker turns back into a ``Task`` (``job_task``). ``tir``
    adds a fused function's TIR as TVM's JSON, which loads 10x faster than its script parses:
    for jobs, never for records."""
    to_job = getattr(task.workload, "to_job", None) if tir else None
    return {"workload": to_job() if to_job else task.workload.to_dict(), "target": task.target,
            "template": task.template}


def job_task(t: dict):
    """The ``Task`` of a ``task_job`` dict."""
    from ..workload import PrimFuncWorkload, Task, workload_from_dict

    doc = PrimFuncWorkload.adopt_job(t["workload"]) if "tir" in t["workload"] else t["workload"]
    return Task(workload_from_dict(doc), t["target"], t["template"])


# what a build worker imports; a forkserver imports it once (a worker replaced after a build
# timeout starts in 20 ms, not 3 s)
PRELOAD = ("tvm", "tensortune.space", "tensortune.workload", "tensortune.measure.prepack")


def _load_heavy_modules() -> None:
    import tvm  # noqa: F401

    from .. import space, workload  # noqa: F401


@functools.lru_cache(maxsize=32)
def _space(task):
    # Cached per worker process: defining a space runs the template once, and a batch usually
    # holds many configs of the same task.
    from ..space import task_space

    return task_space(task)


def _build_one(job: dict) -> tuple[str, str, str | None, float, dict | None]:
    """Worker side: ``(error kind, message, library path, seconds, prepack)`` for one
    candidate."""
    import tvm

    from ..space import Config, InvalidConfigError, apply_config
    from .prepack import split_prepack

    start = time.perf_counter()
    try:
        task = job_task(job["task"])
        sch = apply_config(task, Config.from_json(job["config"]), _space(task))
    except InvalidConfigError as err:
        return (ErrorKind.INVALID_CONFIG.value, str(err)[:300], None, time.perf_counter() - start,
                None)
    if task.target.get("kind") == "cuda":
        return _build_cuda(task, sch, job["dir"], start)
    try:
        mod, prepack = split_prepack(sch.mod["main"], getattr(task.workload, "num_outputs", 1))
        executable = tvm.compile(mod, target=task.tvm_target())
        path = os.path.join(job["dir"], f"{uuid.uuid4().hex}.so")
        executable.export_library(path, fcompile=fast_link)
    except Exception as err:  # TVM lowering/codegen errors and linker failures alike
        return (ErrorKind.COMPILE_ERROR.value, first_line(err), None, time.perf_counter() - start,
                None)
    return (ErrorKind.NONE.value, "", path, time.perf_counter() - start,
            prepack.to_json() if prepack else None)


def _build_cuda(task, sch, out_dir: str, start: float):
    """A cubin and its launch spec for ``tensortune.device_runner`` (``measure.cuda_build``)."""
    from .cuda_build import build_cuda

    try:
        path = build_cuda(task, sch, out_dir)
    except Exception as err:  # nvcc failures, kernels the runner cannot launch, TVM errors
        return (ErrorKind.COMPILE_ERROR.value, first_line(err), None, time.perf_counter() - start,
                None)
    return ErrorKind.NONE.value, "", path, time.perf_counter() - start, None


class LocalBuilder:
    """Builds candidates in ``workers`` processes; each build limited to ``timeout_s`` seconds.

    Libraries go to ``workdir`` (a fresh temporary directory, removed by ``close``, if None).
    With ``cpus`` the workers run only on those cores (never on a device's reserved ones).
    """

    def __init__(self, workers: int = 2, timeout_s: float = 30.0, workdir: str | None = None,
                 cpus: tuple[int, ...] | None = None):
        self.timeout_s = timeout_s
        self._own_dir = workdir is None
        self.workdir = tempfile.mkdtemp(prefix="tensortune-build-") if workdir is None else workdir
        os.makedirs(self.workdir, exist_ok=True)
        self.cpus = tuple(cpus) if cpus else None
        self._pool = WorkerPool(workers, initializer=functools.partial(
            pin_and_init, self.cpus, _load_heavy_modules), preload=PRELOAD)

    def build(self, inputs: list[MeasureInput], limit: BuildDeadline | None = None) -> list[BuildResult]:
        """One ``BuildResult`` per input, in order; failures are results, never exceptions.
        ``limit`` replaces the builder's time limit for this batch (seconds, or a function of
        the build times this batch has seen so far)."""
        jobs = [{"task": task_job(i.task, tir=True), "config": i.config.to_json(),
                 "dir": self.workdir} for i in inputs]
        return [_to_result(r) for r in self._pool.map(_build_one, jobs, limit or self.timeout_s)]

    def close(self) -> None:
        self._pool.close()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "LocalBuilder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _to_result(reply) -> BuildResult:
    if isinstance(reply, JobFailure):
        if reply.kind == TIMEOUT:
            return BuildResult(None, reply.limit_s, ErrorKind.TIMEOUT,
                               f"build exceeded {reply.limit_s:.3g} s")
        prefix = "build worker crashed: " if reply.kind == CRASHED else ""
        return BuildResult(None, 0.0, ErrorKind.COMPILE_ERROR, prefix + reply.message)
    kind, message, path, seconds, prepack = reply
    return BuildResult(path, seconds, ErrorKind(kind), message, prepack)
