"""Runners time built candidates; ``LocalRunner`` does it on this machine, one at a time."""
from __future__ import annotations

import functools
import os
import time
from typing import Protocol, runtime_checkable

from ..errors import raise_if_strict
from ..settings import MeasureSettings
from . import launcher
from .model_timing import time_here
from .pool import CRASHED, TIMEOUT, JobFailure, WorkerPool, pin_and_init
from .types import BuildResult, ErrorKind, MeasureInput, MeasureResult


@runtime_checkable
class Runner(Protocol):
    """Anything that turns built candidates into ``MeasureResult``s (local, RPC, a fake timer)."""

    def run(self, inputs: list[MeasureInput], builds: list[BuildResult],
            verify: list[bool] | None = None) -> list[MeasureResult]:
        """One result per input, in order; build errors pass through unmeasured."""
        ...


MODEL_TIMEOUT_S = 900.0  # a whole model's timing: repeats of a slow network, its upload
# TVM's own step before each repeat: clflush every argument but the first (AutoTVM's and
# MetaSchedule's enable_cpu_cache_flush); it exists on an RPC server as well
FLUSH_BUT_FIRST = "cache_flush_cpu_non_first_arg"


def times_cold(inp: MeasureInput, settings: MeasureSettings) -> bool:
    """Whether ``inp`` is timed with its weights flushed before each call: a CPU function of a
    model whose weights were last read a whole network ago. TVM's flush spares the first
    argument only, so a function that reads a weight first (an embedding's take) stays warm."""
    constants = inp.task.workload.constant_inputs
    return (settings.cold_weights and inp.task.target.get("kind") == "llvm"
            and bool(constants) and 0 not in constants)


def timing_job(inp: MeasureInput, settings: MeasureSettings) -> dict:
    """How a worker times ``inp``: warm, ``number`` calls a repeat, or cold, one call a repeat."""
    s = settings
    if times_cold(inp, s):
        return {"warmup": s.warmup, "number": 1, "repeat": s.cold_repeat, "min_repeat_ms": 0,
                "preproc": FLUSH_BUT_FIRST}
    return {"warmup": s.warmup, "number": s.number, "repeat": s.repeat,
            "min_repeat_ms": s.min_repeat_ms, "preproc": ""}


def evaluator(fn, dev, job: dict):
    """``fn``'s time evaluator for a ``timing_job``."""
    return fn.time_evaluator("main", dev, number=job["number"], repeat=job["repeat"],
                             min_repeat_ms=job["min_repeat_ms"], f_preproc=job["preproc"])


def use_threads(threads: int) -> None:
    """Size TVM's CPU thread pool for kernels run by this process.

    TVM reads TVM_NUM_THREADS once, when its pool first starts (the first parallel kernel);
    without it TVM takes half the logical CPUs, i.e. a single thread on a 2-vCPU machine.
    Its threads are left unpinned (TVM_BIND_THREADS=0, unless the caller set it): pinning
    them, TVM widens the calling thread's affinity to every core, out of the cores a
    measurement worker was given (``pool.pin_and_init``), and ties a worker to a core that
    another process keeps busy (DeiT-S 10x slower with a busy loop on one of two cores, 1.5-4x
    unpinned; docs/benchmarks.md).
    """
    os.environ["TVM_NUM_THREADS"] = str(int(threads))
    os.environ.setdefault("TVM_BIND_THREADS", "0")


def _load_runtime(threads: int) -> None:
    use_threads(threads)
    import numpy  # noqa: F401
    import tvm  # noqa: F401

    from .. import workload  # noqa: F401


@functools.lru_cache(maxsize=48)  # a model has up to a few dozen tasks
def _data(workload, seed: int):
    # Cached per worker process: inputs and the numpy reference are the same for every
    # candidate of a workload, and the reference of a large conv2d is not cheap.
    inputs = workload.random_inputs(seed)
    return inputs, workload.reference(*inputs), workload.output_shape


def _run_one(job: dict) -> tuple[str, tuple[float, ...], bool, str, float | None]:
    """Worker side: ``(error kind, costs, verified, message, contention)`` for one library."""
    import numpy as np
    import tvm

    from ..workload import workload_from_dict

    workload = workload_from_dict(job["workload"])
    inputs, reference, out_shape = _data(workload, job["seed"])
    dev = tvm.cpu()
    fn = tvm.runtime.load_module(job["path"])
    # timed as a model runs it: its tasks on the launcher
    launcher.install(job["path"])
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    if job.get("prepack"):
        args = _prepacked(fn, args, job["prepack"], dev)
    out = tvm.runtime.tensor(np.zeros(out_shape, workload.dtype), dev)
    for _ in range(job["warmup"]):
        fn["main"](*args, out)
    timer = evaluator(fn, dev, job)
    before = _cpu_clocks(job.get("cpus"))
    costs = tuple(float(c) for c in timer(*args, out).results)
    busy = contention(before, _cpu_clocks(job.get("cpus")))
    if not job["verify"]:
        return ErrorKind.NONE.value, costs, False, "", busy
    # a fresh zero output, so a kernel that skips writes cannot pass on the timing runs' results
    out = tvm.runtime.tensor(np.zeros(out_shape, workload.dtype), dev)
    fn["main"](*args, out)
    got = out.numpy()
    if not np.allclose(got, reference, rtol=job["rtol"], atol=job["atol"]):
        error = float(np.max(np.abs(got.astype(np.float64) - reference)))
        return (ErrorKind.WRONG_RESULT.value, costs, False,
                f"max abs error {error:.3g} vs reference", busy)
    return ErrorKind.NONE.value, costs, True, "", busy


def _prepacked(fn, args: list, prepack: dict, dev) -> list:
    """``args`` with the constant weights that the library packs ahead replaced by their packed
    copies (``measure.prepack``: done once, like a model's compile-time packing, not timed)."""
    import numpy as np
    import tvm

    packed = [tvm.runtime.tensor(np.zeros(shape, dtype), dev)
              for shape, dtype in zip(prepack["shapes"], prepack["dtypes"])]
    fn["prepack"](*[args[i] for i in prepack["inputs"]], *packed)
    args = list(args)
    for i, tensor in zip(prepack["inputs"], packed):
        args[i] = tensor
    return args


def _cpu_clocks(cpus=None) -> tuple[float, float, float] | None:
    """(wall s, busy CPU s of the whole machine, or of ``cpus`` only, incl. steal, CPU s of
    this process), or None where /proc/stat is missing."""
    wanted = {f"cpu{c}" for c in cpus} if cpus else {"cpu"}
    busy = 0
    try:
        with open("/proc/stat") as f:
            for line in f:
                name, *values = line.split()
                if name in wanted:
                    fields = [int(v) for v in values]
                    # user nice system idle iowait irq softirq steal: all but idle and iowait
                    # are someone's work
                    busy += sum(fields[i] for i in (0, 1, 2, 5, 6, 7) if i < len(fields))
                elif not name.startswith("cpu"):
                    break
    except (OSError, ValueError):
        return None
    return time.perf_counter(), busy / os.sysconf("SC_CLK_TCK"), time.process_time()


def contention(before, after) -> float | None:
    """Cores that processes other than this one kept busy between two ``_cpu_clocks``; None
    when unknown or the window is too short for the 10 ms clock ticks to tell."""
    if before is None or after is None or after[0] - before[0] < 0.1:
        return None
    wall, busy, own = (a - b for a, b in zip(after, before))
    return max(0.0, (busy - own) / wall)


class LocalRunner:
    """Times candidates in one persistent worker process, strictly one after another.

    A candidate that segfaults or hangs costs a worker restart, never the caller; its ``run_s``
    includes that restart. A candidate built for a CPU this host is not (say AVX-512 code on an
    AVX2 machine) is not run: its result names the missing instruction-set extensions.
    """

    def __init__(self, settings: MeasureSettings, seed: int = 0,
                 cpus: tuple[int, ...] | None = None):
        self.settings = settings
        self.seed = seed
        # reserved cores (a device of the multi-job scheduler): one kernel thread per core, and
        # only those cores' load counts as contention
        self.cpus = tuple(cpus) if cpus else None
        threads = len(self.cpus) if self.cpus else settings.threads
        self._pool = WorkerPool(1, initializer=functools.partial(
            pin_and_init, self.cpus, functools.partial(_load_runtime, threads)))
        self._unrunnable: dict[str, str] = {}  # target key -> why its code cannot run here

    def run(self, inputs: list[MeasureInput], builds: list[BuildResult],
            verify: list[bool] | None = None) -> list[MeasureResult]:
        """One result per input; ``verify`` defaults to every input when settings.verify == "all"."""
        s = self.settings
        if verify is None:
            verify = [s.verify == "all"] * len(inputs)
        if any(b.error is ErrorKind.NONE for b in builds):
            self._pool.start()  # so the first run_s does not include importing TVM
        results = []
        for inp, build, check in zip(inputs, builds, verify, strict=True):
            if build.error is not ErrorKind.NONE:
                results.append(MeasureResult((), build.error, build.message, build_s=build.build_s,
                                             timestamp=time.time(), detail=build.detail))
                continue
            why = self._why_unrunnable(inp.task.target)
            if why:
                results.append(MeasureResult((), ErrorKind.RUNTIME_ERROR, why,
                                             build_s=build.build_s, timestamp=time.time()))
                continue
            job = {"path": build.path, "workload": inp.task.workload.to_dict(), "seed": self.seed,
                   "prepack": build.prepack, **timing_job(inp, s), "verify": bool(check),
                   "rtol": s.rtol, "atol": s.atol, "cpus": self.cpus}
            results.append(self._time(job, build.build_s))
        return results

    def _time(self, job: dict, build_s: float) -> MeasureResult:
        """One candidate's result; retimed while other processes kept more than
        ``max_contention`` cores busy, and marked in its message if they always did."""
        s = self.settings
        least, run_s = None, 0.0
        for attempt in range(1 + max(0, s.contention_retries)):
            if attempt:
                time.sleep(0.2 * attempt)  # give a burst of neighbour work time to pass
            start = time.perf_counter()
            (reply,) = self._pool.map(_run_one, [job], s.run_timeout_s)
            run_s += time.perf_counter() - start
            busy = reply[4] if not isinstance(reply, JobFailure) else None
            # only a successful timing is worth another try: a wrong result stays wrong
            if busy is None or busy <= s.max_contention or reply[0] != ErrorKind.NONE.value:
                return _to_result(reply, build_s, run_s, s.run_timeout_s)
            if least is None or busy < least[4]:
                least = reply
        kind, costs, verified, message, busy = least
        note = f"timed beside {busy:.1f} busy cores of other processes"
        return _to_result((kind, costs, verified, "; ".join(filter(None, (message, note))), busy),
                          build_s, run_s, s.run_timeout_s)

    def time_model(self, directory: str, repeat: int, min_repeat_ms: int) -> tuple[float, ...]:
        """A whole saved model (``model_timing``) timed in the worker, on this runner's cores
        and threads; ``RuntimeError`` naming why when the worker could not."""
        job = {"directory": str(directory), "repeat": repeat, "min_repeat_ms": min_repeat_ms}
        (reply,) = self._pool.map(time_here, [job], MODEL_TIMEOUT_S)
        if isinstance(reply, JobFailure):
            raise RuntimeError(f"timing the model in {directory} failed: {reply.message}")
        return reply

    def _why_unrunnable(self, target: dict) -> str:
        from ..workload import target_key, untimeable_reason

        key = target_key(target)
        if key not in self._unrunnable:
            # CUDA passes: a GPU host's device runner times its kernels with this runner
            why = untimeable_reason(target, cuda_here=True)
            self._unrunnable[key] = f"not run: {why}" if why else ""
        return self._unrunnable[key]

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> "LocalRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _to_result(reply, build_s: float, run_s: float, timeout_s: float) -> MeasureResult:
    stamp = time.time()
    if isinstance(reply, JobFailure):
        if reply.kind == TIMEOUT:
            kind, message = ErrorKind.TIMEOUT, f"run exceeded {timeout_s:g} s"
        elif reply.kind == CRASHED:
            kind, message = ErrorKind.RUNTIME_ERROR, f"candidate crashed the runner: {reply.message}"
        else:  # the job raised in the worker: in strict mode, raised here
            kind, message = ErrorKind.RUNTIME_ERROR, reply.message[:300]
            raise_if_strict(f"run failed: {message}", reply.detail)
        return MeasureResult((), kind, message, build_s=build_s, run_s=run_s, timestamp=stamp,
                             detail=reply.detail)
    kind, costs, verified, message, _ = reply
    kind = ErrorKind(kind)
    costs = costs if kind is ErrorKind.NONE else ()
    return MeasureResult(costs, kind, message, build_s, run_s, verified, stamp)
