"""Compile a whole model with the best configs found, and run, time, save and load the result."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import statistics
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..frontend import Model, TensorInfo
from ..frontend.model import random_inputs
from ..measure import use_threads
from ..records import Record, best_record, load_records
from ..space import Config, InvalidConfigError, apply_config
from ..workload import Task
from .extract import fused_calls, fused_module, workload_of

LIBRARY = "model.so"
METADATA = "model.json"


def best_records_of(log: str | os.PathLike, tasks: list[Task]) -> dict[str, Record]:
    """``{task key: best error-free record}`` of the tasks that have one in the records log."""
    records = load_records(log)
    found = {}
    for task in tasks:
        record = best_record(records, task)
        if record is not None:
            found[task.key] = record
    return found


Best = Mapping[str, Config] | str | os.PathLike  # task key -> config, or a records log


def resolve_best(best: Best, tasks: list[Task]) -> dict[str, Config]:
    """``{task key: config}``: a mapping as given (keys of other tasks are simply never looked
    up), or the config of each task's best record in a records log."""
    if isinstance(best, (str, os.PathLike)):
        return {k: r.config for k, r in best_records_of(best, tasks).items()}
    return {k: v if isinstance(v, Config) else Config(v) for k, v in best.items()}


def scheduled_module(model: Model, target: dict, best: Best, template: str = "cpu.generic"):
    """The fused module of ``model`` with every function whose task has a config in ``best``
    replaced by its scheduled version; returns ``(module, names of the tuned functions)``.

    The other functions stay unscheduled, i.e. get TVM's default lowering when compiled.
    """
    fused = fused_module(model, target)
    calls = [(call, Task(workload_of(call), dict(target), template)) for call in fused_calls(fused)]
    configs = resolve_best(best, [task for _, task in calls])
    tuned, scheduled = [], {}
    for call, task in calls:
        config = configs.get(task.key)
        if config is None or call.symbolic_args or call.num_outputs != 1:
            continue
        if task.key not in scheduled:  # structurally equal functions share one schedule
            try:
                scheduled[task.key] = apply_config(task, config).mod["main"]
            except InvalidConfigError as err:
                raise InvalidConfigError(f"config for {call.name} (task {task.key}) does not "
                                         f"apply: {err}") from err
        fused[fused.get_global_var(call.name)] = _as_replacement(scheduled[task.key], call.func)
        tuned.append(call.name)
    return fused, tuple(tuned)


def _as_replacement(scheduled, original):
    """The scheduled function with the original's attributes (no global symbol, as FuseTIR left
    it), marked scheduled so no later default schedule touches it."""
    func = scheduled.without_attr("global_symbol")
    if original.attrs is not None:
        func = func.with_attrs(dict(original.attrs.items()))
    return func.with_attr("tirx.is_scheduled", True)


def compile_fused(mod, target: dict):
    """Compile a fused (already legalized) module: TVM's CPU pipeline after ``FuseTIR``."""
    import tvm
    from tvm.relax import pipeline

    tgt = tvm.target.Target(target)
    try:
        lower = pipeline.dataflow_lower_passes(tgt)
    except AttributeError:
        # TVM 0.27's cpu_generic package does not export this function (its pipeline module
        # defines it); MetaSchedule's compile_relax falls back the same way
        from tvm.relax.backend.cpu_generic import pipeline as cpu_pipeline

        lower = cpu_pipeline.dataflow_lower_passes(tgt)
    rest = tvm.transform.Sequential(lower + pipeline.finalize_passes(tgt))
    with tgt:
        return tvm.compile(mod, target=tgt, relax_pipeline=rest)


def build_model(model: Model, target: dict, best: Best | None = None,
                template: str = "cpu.generic", threads: int | None = None) -> "CompiledModel":
    """Compile ``model`` for ``target``, each tuned function with its best config.

    ``best`` maps task keys (``Task.key``) to configs, or is the path of a records log whose
    best record per task is used; functions without one keep TVM's default lowering.
    ``threads`` sizes TVM's thread pool for running the result (default: every CPU).
    """
    use_threads(threads or os.cpu_count() or 1)
    mod, tuned = scheduled_module(model, target, {} if best is None else best, template)
    executable = compile_fused(mod, target)
    return CompiledModel(executable, model.inputs, model.outputs, tuned, model.name, dict(target))


@dataclasses.dataclass(frozen=True)
class TimingStats:
    """Seconds per model run, one entry per repeat."""

    costs: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.costs)

    @property
    def median(self) -> float:
        return statistics.median(self.costs)

    @property
    def min(self) -> float:
        return min(self.costs)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.costs)

    def to_json(self) -> dict:
        return {"costs": list(self.costs), "mean": self.mean, "median": self.median,
                "min": self.min, "std": self.std}


class CompiledModel:
    """A compiled model on the CPU: ``run`` numpy inputs, ``time`` it, ``save``/``load`` it.

    ``tuned`` names the fused functions that use a tuned schedule.
    """

    def __init__(self, library, inputs: tuple[TensorInfo, ...], outputs: tuple[TensorInfo, ...],
                 tuned: tuple[str, ...] = (), name: str = "model", target: dict | None = None,
                 library_path: str | None = None):
        import tvm
        from tvm import relax

        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        self.tuned, self.name = tuple(tuned), name
        self.target = dict(target or {})
        self._library = library
        self._library_path = library_path
        self._dev = tvm.cpu()
        self._vm = relax.VirtualMachine(library, self._dev)

    def _args(self, arrays):
        import tvm

        if len(arrays) != len(self.inputs):
            raise ValueError(f"{self.name} takes {len(self.inputs)} input(s) "
                             f"({', '.join(t.name for t in self.inputs)}), got {len(arrays)}")
        args = []
        for info, x in zip(self.inputs, arrays):
            x = np.asarray(x)
            if tuple(x.shape) != info.shape:
                raise ValueError(f"input {info.name}: expected shape {info.shape}, "
                                 f"got {tuple(x.shape)}")
            if x.dtype != np.dtype(info.dtype):
                if not np.can_cast(x.dtype, info.dtype, "same_kind"):
                    raise ValueError(f"input {info.name}: expected {info.dtype}, got {x.dtype}")
                x = x.astype(info.dtype)
            args.append(tvm.runtime.tensor(np.ascontiguousarray(x), self._dev))
        return args

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """The model's outputs, flattened in order, for numpy inputs of the imported shapes."""
        return _flatten(self._vm["main"](*self._args(inputs)))

    def time(self, repeat: int = 10, number: int = 1, min_repeat_ms: int = 0,
             inputs: list[np.ndarray] | None = None, seed: int = 0) -> TimingStats:
        """Time ``repeat`` batches of ``number`` runs (after one warm-up) on the given inputs,
        or on random ones."""
        if inputs is None:
            inputs = random_inputs(self.inputs, seed)
        args = self._args(inputs)
        timer = self._vm.time_evaluator("main", self._dev, number=number, repeat=repeat,
                                        min_repeat_ms=min_repeat_ms)
        return TimingStats(tuple(float(c) for c in timer(*args).results))

    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``model.so`` and ``model.json`` (signature, target, tuned functions) to
        ``directory``; returns the directory."""
        import tvm

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        if self._library_path is not None:
            if Path(self._library_path).resolve() != (out / LIBRARY).resolve():
                shutil.copyfile(self._library_path, out / LIBRARY)
        else:
            with _without_native_lines("Scope Saving:"):
                self._library.export_library(str(out / LIBRARY))
        meta = {"name": self.name, "inputs": [t.to_json() for t in self.inputs],
                "outputs": [t.to_json() for t in self.outputs], "tuned": list(self.tuned),
                "target": self.target, "tvm": tvm.__version__}
        (out / METADATA).write_text(json.dumps(meta, indent=1) + "\n")
        return out

    @staticmethod
    def load(directory: str | os.PathLike, threads: int | None = None) -> "CompiledModel":
        """A model saved by ``save`` (on a machine of the same CPU kind)."""
        import tvm

        path = Path(directory)
        if not (path / LIBRARY).exists() or not (path / METADATA).exists():
            raise FileNotFoundError(f"{path} has no saved model ({LIBRARY} and {METADATA})")
        use_threads(threads or os.cpu_count() or 1)
        meta = json.loads((path / METADATA).read_text())
        library = tvm.runtime.load_module(str(path / LIBRARY))
        return CompiledModel(library, tuple(TensorInfo.from_json(t) for t in meta["inputs"]),
                             tuple(TensorInfo.from_json(t) for t in meta["outputs"]),
                             tuple(meta.get("tuned", ())), meta.get("name", "model"),
                             meta.get("target"), str(path / LIBRARY))


@contextlib.contextmanager
def _without_native_lines(noise: str):
    """Drop one known debug line that TVM 0.27's VM prints (to the C++ stderr, once per memory
    scope) on every export; anything else it prints is passed through afterwards."""
    import sys
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            for line in sink.read().decode(errors="replace").splitlines(keepends=True):
                if noise not in line:
                    sys.stderr.write(line)


def _flatten(value) -> list[np.ndarray]:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    out = []
    for item in value:
        out.extend(_flatten(item))
    return out
