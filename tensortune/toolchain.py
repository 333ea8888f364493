"""What building (``measure``) and feature extraction (``features``) both start: nvcc, and
worker processes that compile candidates.

Both compile candidates in ``measure.pool.WorkerPool`` workers that import TVM once (from a
forkserver, ``PRELOAD``) and receive tasks as plain data (``task_job`` / ``job_task``); both run
nvcc on CUDA candidates (``compile_cuda``). Kept here, below both packages, so that neither
imports the other's internals.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

NVCC = "/usr/local/bin/nvcc"

# what a compile worker imports; a forkserver imports it once (a worker replaced after a build
# timeout starts in 20 ms, not 3 s)
PRELOAD = ("tvm", "tensortune.space", "tensortune.workload", "tensortune.measure.prepack")


def load_heavy_modules() -> None:
    """Worker start-up: import TVM and the packages every compile job needs."""
    import tvm  # noqa: F401

    from . import space, workload  # noqa: F401


def task_job(task, tir: bool = False) -> dict:
    """A task as plain data that a worker turns back into a ``Task`` (``job_task``). ``tir``
    adds a fused function's TIR as TVM's JSON, which loads 10x faster than its script parses:
    for jobs, never for records."""
    return {"workload": task.workload.to_job() if tir else task.workload.to_dict(),
            "target": task.target,
            "template": task.template}


def job_task(t: dict):
    """The ``Task`` of a ``task_job`` dict."""
    from .workload import PrimFuncWorkload, Task, workload_from_dict

    doc = PrimFuncWorkload.adopt_job(t["workload"]) if "tir" in t["workload"] else t["workload"]
    return Task(workload_from_dict(doc), t["target"], t["template"])


class NvccError(RuntimeError):
    """nvcc or ptxas failed (or is missing)."""


def compile_cuda(source: str, arch: str = "sm_90", nvcc: str = NVCC,
                 timeout_s: float = 120.0, cubin_path: str | None = None) -> tuple[str, str]:
    """(PTX text, ptxas report) of CUDA C ``source``: ``nvcc -ptx``, then ``nvcc -cubin -Xptxas
    -v`` on that PTX, in a temporary directory; the cubin is kept at ``cubin_path`` if given."""
    if shutil.which(nvcc) is None:
        raise NvccError(f"nvcc not found at {nvcc!r}")
    with tempfile.TemporaryDirectory(prefix="tensortune-cuda-") as tmp:
        cu, ptx_path = os.path.join(tmp, "kernel.cu"), os.path.join(tmp, "kernel.ptx")
        with open(cu, "w") as f:
            f.write(source)
        run_tool([nvcc, f"-arch={arch}", "-ptx", "-w", cu, "-o", ptx_path], timeout_s)
        cubin = os.path.join(tmp, "kernel.cubin")
        report = run_tool([nvcc, f"-arch={arch}", "-cubin", "-Xptxas", "-v", ptx_path, "-o",
                           cubin], timeout_s)
        if cubin_path:
            shutil.copyfile(cubin, cubin_path)
        with open(ptx_path) as f:
            return f.read(), report


def run_tool(cmd: list[str], timeout_s: float) -> str:
    """stdout and stderr of ``cmd``, killed with its whole process group after ``timeout_s``;
    ``NvccError`` (with the tool's full stderr) when it fails or overruns."""
    # nvcc's front end (cicc) is a grandchild: killing nvcc, or the worker that ran it, leaves it
    # compiling (a huge unrolled kernel held two cores for 40 minutes so). coreutils' timeout
    # kills its whole process group when the time is up, even once its parent is gone.
    killer = shutil.which("timeout")
    bounded = [killer, "-s", "KILL", str(max(1, int(timeout_s))), *cmd] if killer else cmd
    try:
        done = subprocess.run(bounded, capture_output=True, text=True, timeout=timeout_s + 5)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise NvccError(f"{os.path.basename(cmd[0])} failed: {err}") from err
    if done.returncode != 0:
        # the whole of stderr: the record keeps the first line, errors.log all of it
        raise NvccError(f"{' '.join(cmd[:3])} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout + done.stderr
