"""``LocalBuilder``: schedule and compile candidates to shared libraries in worker processes."""
from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence

from ..errors import full_text, raise_if_strict, set_strict, strict
# task_job and job_task are used from here too (measure.cuda_export, tests)
from ..toolchain import PRELOAD, job_task, load_heavy_modules, task_job  # noqa: F401
from .link import fast_link
from .pool import CRASHED, TIMEOUT, JobFailure, WorkerPool, first_line, pin_and_init
from .types import BuildResult, ErrorKind, MeasureInput

# a batch's time limit per build: seconds, or a function of the build times seen so far
BuildDeadline = float | Callable[[Sequence[float]], float]


def _build_one(job: dict) -> tuple[str, str, str | None, float, dict | None, str]:
    """Worker side: ``(error kind, message, library path, seconds, prepack, detail)`` for one
    candidate (``detail``: an error's full text)."""
    import tvm

    from ..space import Config, InvalidConfigError, apply_config, task_space
    from .prepack import split_prepack

    set_strict(job.get("strict"))  # the parent's switch: template application reads it here
    start = time.perf_counter()
    try:
        task = job_task(job["task"])
        sch = apply_config(task, Config.from_json(job["config"]), task_space(task))
    except InvalidConfigError as err:
        # a template's own refusal says all in its message; a step that failed (TVM's refusal,
        # or a bug in the template) has its cause's traceback kept for errors.log
        whole = err.__cause__ is None and len(str(err)) <= 300 and "\n" not in str(err)
        return (ErrorKind.INVALID_CONFIG.value, str(err)[:300], None, time.perf_counter() - start,
                None, "" if whole else full_text(err))
    if task.target.get("kind") == "cuda":
        return _build_cuda(task, sch, job["dir"], start)
    try:
        mod, prepack = split_prepack(sch.mod["main"], task.workload.outputs)
        executable = tvm.compile(mod, target=task.tvm_target())
        path = os.path.join(job["dir"], f"{uuid.uuid4().hex}.so")
        executable.export_library(path, fcompile=fast_link)
    except Exception as err:  # TVM lowering/codegen errors and linker failures alike
        # (in strict mode the parent raises it: see _to_result)
        return (ErrorKind.COMPILE_ERROR.value, first_line(err), None, time.perf_counter() - start,
                None, full_text(err))
    return (ErrorKind.NONE.value, "", path, time.perf_counter() - start,
            prepack.to_json() if prepack else None, "")


def _build_cuda(task, sch, out_dir: str, start: float):
    """A cubin and its launch spec for ``tensortune.device_runner`` (``measure.cuda_build``)."""
    from .cuda_build import build_cuda

    try:
        path = build_cuda(task, sch, out_dir)
    except Exception as err:  # nvcc failures, kernels the runner cannot launch, TVM errors
        return (ErrorKind.COMPILE_ERROR.value, first_line(err), None, time.perf_counter() - start,
                None, full_text(err))
    return ErrorKind.NONE.value, "", path, time.perf_counter() - start, None, ""


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
            pin_and_init, self.cpus, load_heavy_modules), preload=PRELOAD)

    def build(self, inputs: list[MeasureInput], limit: BuildDeadline | None = None) -> list[BuildResult]:
        """One ``BuildResult`` per input, in order; failures are results, never exceptions.
        ``limit`` replaces the builder's time limit for this batch (seconds, or a function of
        the build times this batch has seen so far)."""
        jobs = [{"task": task_job(i.task, tir=True), "config": i.config.to_json(),
                 "dir": self.workdir, "strict": strict()} for i in inputs]
        # a config the template refuses is done in milliseconds: counted, it pulled a GPU
        # space's median build time down until real builds of 3 s were cut short
        return [_to_result(r) for r in self._pool.map(_build_one, jobs, limit or self.timeout_s,
                                                      counted=_built)]

    def close(self) -> None:
        self._pool.close()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "LocalBuilder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _built(reply) -> bool:
    """Whether a build worker's reply is a library built (its time counts toward the limit)."""
    return reply[0] == ErrorKind.NONE.value


def _to_result(reply) -> BuildResult:
    # Builds fail in workers, as values; strict mode raises them here, in the caller. A config
    # the template itself refuses (InvalidConfigError) stays a value even then: spaces hold
    # invalid configs by design, and a step TVM refuses raises in the worker when strict.
    if isinstance(reply, JobFailure):
        if reply.kind == TIMEOUT:
            return BuildResult(None, reply.limit_s, ErrorKind.TIMEOUT,
                               f"build exceeded {reply.limit_s:.3g} s")
        prefix = "build worker crashed: " if reply.kind == CRASHED else ""
        raise_if_strict(f"build failed: {prefix}{reply.message}", reply.detail)
        return BuildResult(None, 0.0, ErrorKind.COMPILE_ERROR, prefix + reply.message,
                           detail=reply.detail)
    kind, message, path, seconds, prepack, detail = reply
    if kind == ErrorKind.COMPILE_ERROR.value:
        raise_if_strict(f"build failed: {message}", detail)
    return BuildResult(path, seconds, ErrorKind(kind), message, prepack, detail)
