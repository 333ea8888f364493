"""A session's stage results as values, and the stage functions that make them.

imported model -> tasks -> tuned records -> built module -> saved run: each a frozen
dataclass that the next stage takes. ``Session`` is a facade that keeps the latest of each
(``imported``, ``extracted``, ``tuned``, ``built``, ``saved``); these functions hold no state.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..tasks import build_model, extract_tasks, write_metaschedule_db


def _empty() -> Mapping:
    return MappingProxyType({})  # read-only: a stage's result is not edited in place


@dataclass(frozen=True)
class ImportedModel:
    """A model through a frontend (``frontend.Model``), with the torch module and example
    inputs it came from (None for ONNX) and the seconds the import took."""

    model: Any
    torch_module: Any = None
    example_inputs: tuple | None = None
    import_s: float = 0.0


@dataclass(frozen=True)
class ExtractedTasks:
    """The model's distinct functions (``tasks.ModelTask``, tunable or not) with their weights."""

    tasks: tuple
    extract_s: float = 0.0

    @property
    def tunable(self) -> list:
        return [t for t in self.tasks if t.tunable]


@dataclass(frozen=True)
class TunedRecords:
    """What tuning left for the build: the measured tuning's ``ScheduleResult`` (its records are
    in the run's log and the shared records file), and the hardware-free picks (task key ->
    ``tuner.static.StaticResult``) with the timed best of those that were verified."""

    schedule: Any = None
    static: Mapping = field(default_factory=_empty)
    verified: Mapping = field(default_factory=_empty)
    summary: Mapping = field(default_factory=_empty)  # hardware-free counts

    def best(self, records_path: Path):
        """What a tuned build uses: the hardware-free picks (the timed best where verified),
        else the records (each task's best measured config), else None (TVM's defaults)."""
        if self.static:
            return {k: self.verified.get(k, r.best) for k, r in self.static.items() if r.best}
        return records_path if records_path.exists() else None


@dataclass(frozen=True)
class BuiltModel:
    """A compiled module (``tasks.CompiledModel``), the configs it was asked to use (``chosen``,
    None: the tuned best) and the seconds the build took."""

    compiled: Any
    chosen: Any = None
    build_s: float = 0.0


@dataclass(frozen=True)
class SavedRun:
    """Where a build was saved: the module's directory and the MetaSchedule database beside it
    (None when none was written)."""

    module_dir: Path
    database: Path | None = None


def extract(imported: ImportedModel, target: dict, graph) -> ExtractedTasks:
    """The model's tasks for ``target`` under the whole-model rewrites ``graph``."""
    start = time.perf_counter()
    tasks = extract_tasks(imported.model, target, graph=graph)
    return ExtractedTasks(tuple(tasks), time.perf_counter() - start)


def build(imported: ImportedModel, target: dict, best, threads: int, graph,
          cuda_graph: bool = True, chosen=None) -> BuiltModel:
    """Compile the model with ``best`` (configs by task key, a records log, or None: TVM's
    defaults); ``chosen`` is what the caller asked for, kept for ``save``."""
    start = time.perf_counter()
    compiled = build_model(imported.model, target, best, threads=threads, graph=graph,
                           cuda_graph=cuda_graph)
    return BuiltModel(compiled, chosen, time.perf_counter() - start)


def save(built: BuiltModel, module_dir: Path, tasks: ExtractedTasks | None, best,
         database_dir: Path) -> SavedRun:
    """Write the module to ``module_dir`` and, where the tasks and their best configs are
    known, those configs as a MetaSchedule database in ``database_dir``."""
    out = built.compiled.save(module_dir)
    database = None
    if tasks is not None and best is not None:
        write_metaschedule_db(tasks.tunable, best, database_dir)
        database = database_dir
    return SavedRun(Path(out), database)
