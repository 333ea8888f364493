"""Where a compiled model's time goes: per fused function, and between them.

The Relax VM calls an instrument before and after every call it makes; the time between the
two is the call's, kernel launch included. Calls of VM builtins (allocation, shape checks) are
summed as the runtime's own work, and whatever the uninstrumented latency leaves over beyond
kernels and builtins is the interpreter's overhead between calls.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from collections import defaultdict

from .compile import schedule_of
from .compiled import CompiledModel

PREPACKED = "_prepacked"  # suffix TVM's weight-prepacking split gives a kernel


@dataclasses.dataclass(frozen=True)
class FunctionProfile:
    """One fused function: its calls per model run and their summed median time."""

    name: str
    calls: int
    seconds: float
    flops: int  # per model run (all calls)
    tuned: bool
    # how it was built (``compile.function_table``): tuned, seeded, fallback, dlight or
    # default (TVM's unscheduled lowering)
    schedule: str = ""

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class ModelProfile:
    """A model's latency split into kernels, VM builtins and the rest (interpreter overhead)."""

    latency_s: float  # median of uninstrumented runs
    functions: tuple[FunctionProfile, ...]  # slowest first
    builtins_s: float
    peak_gflops: float | None = None

    @property
    def kernels_s(self) -> float:
        return sum(f.seconds for f in self.functions)

    @property
    def overhead_s(self) -> float:
        """Latency not spent in kernels: VM builtins plus the interpreter between calls."""
        return max(0.0, self.latency_s - self.kernels_s)

    @property
    def flops(self) -> int:
        return sum(f.flops for f in self.functions)

    def default_functions(self) -> list[FunctionProfile]:
        """The functions built with TVM's unscheduled default, slowest first."""
        return [f for f in self.functions if f.schedule == "default"]

    def to_json(self) -> dict:
        return {"latency_ms": self.latency_s * 1e3, "kernels_ms": self.kernels_s * 1e3,
                "builtins_ms": self.builtins_s * 1e3, "overhead_ms": self.overhead_s * 1e3,
                "gflops": self.flops / self.latency_s / 1e9 if self.latency_s else 0.0,
                "peak_gflops": self.peak_gflops,
                "default_functions": [{"name": f.name, "ms": f.seconds * 1e3,
                                       "share": f.seconds / self.latency_s if self.latency_s
                                       else 0.0} for f in self.default_functions()],
                "functions": [{**dataclasses.asdict(f), "ms": f.seconds * 1e3,
                               "share": f.seconds / self.latency_s if self.latency_s else 0.0,
                               "gflops": f.gflops,
                               "of_peak": f.gflops / self.peak_gflops if self.peak_gflops else None}
                              for f in self.functions]}


def profile_model(compiled: CompiledModel, repeat: int = 20, inputs=None,
                  peak_gflops: float | None = None) -> ModelProfile:
    """Run ``compiled`` ``repeat`` times instrumented (per-call times, medians over runs) and
    time it ``repeat`` times plainly; ``peak_gflops`` (the FMA roofline) is only reported."""
    import tvm

    from ..frontend.model import random_inputs

    args = compiled._args(inputs if inputs is not None else random_inputs(compiled.inputs))
    latency = compiled.time(repeat=repeat, inputs=None if inputs is None else inputs).median
    runs: list[dict[str, float]] = []
    current: dict[str, float] = defaultdict(float)
    started: list[float] = []

    def instrument(func, symbol, before, ret, *call_args):
        now = time.perf_counter()
        if before:
            started.append(now)
        else:
            current[str(symbol)] += now - started.pop()
        return 0

    vm = compiled._vm
    vm.set_instrument(tvm.runtime.convert(instrument) if hasattr(tvm.runtime, "convert")
                      else instrument)
    try:
        vm["main"](*args)  # warm-up
        for _ in range(repeat):
            current.clear()
            vm["main"](*args)
            runs.append(dict(current))
    finally:
        vm.set_instrument(None)
    symbols = {s for run in runs for s in run}
    median = {s: statistics.median(run.get(s, 0.0) for run in runs) for s in symbols}
    builtins = sum(t for s, t in median.items() if s.startswith("vm.builtin."))
    functions = []
    for symbol, seconds in median.items():
        if symbol.startswith("vm.builtin.") or symbol == "main":
            continue
        name = symbol[: -len(PREPACKED)] if symbol.endswith(PREPACKED) else symbol
        info = compiled.functions.get(name, {"tuned": name in compiled.tuned})
        calls = int(info.get("calls", 1))
        functions.append(FunctionProfile(name, calls, seconds, int(info.get("flops", 0)) * calls,
                                         bool(info.get("tuned", name in compiled.tuned)),
                                         schedule_of(info)))
    functions.sort(key=lambda f: -f.seconds)
    return ModelProfile(latency, tuple(functions), builtins, peak_gflops)


def default_function_shares(compiled: CompiledModel, repeat: int = 5) -> list[dict]:
    """``[{"name", "ms", "share"}]`` of the functions built with TVM's unscheduled default,
    slowest first, from a short profile of the model (run only if there are any, so the share
    is measured, not guessed from FLOPs)."""
    names = compiled.default_functions()
    if not names:
        return []
    timed = {f["name"]: f for f in profile_model(compiled, repeat=repeat).to_json()["functions"]}
    rows = [{"name": n, "ms": timed[n]["ms"] if n in timed else 0.0,
             "share": timed[n]["share"] if n in timed else 0.0} for n in names]
    return sorted(rows, key=lambda r: -r["ms"])
