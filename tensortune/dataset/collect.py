"""Measuring datasets: ``collect_dataset`` grows one with random and tuner-guided configs
(``remeasure`` times them again in later sessions).

    tasks = resolve_tasks(["benchmark", "resnet18"], target)
    collect_dataset("data/cpu.jsonl.gz", tasks, per_task=48, settings=settings)

Records are appended and flushed per measurement, so a killed run resumes where it stopped.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..measure.types import ErrorKind, MeasureInput, MeasureResult
from ..records import RecordWriter, load_records, pack_records, unpack_records
from ..settings import Settings
from ..workload import Task
from .base import MODEL_OPS, TaskInfo, benchmark_workloads, op_kind, working_log, write_manifest


def _latest(out: str | os.PathLike) -> Path | None:
    """Where ``out``'s records are: the working log a killed run left (it holds everything of
    the packed file and more), else ``out`` itself; None if neither exists."""
    log = working_log(out)
    return log if log.exists() else (Path(out) if Path(out).exists() else None)


@contextmanager
def _measuring(out: str | os.PathLike, settings: Settings
               ) -> Iterator[tuple[object, object, RecordWriter]]:
    """A builder, a runner and a writer appending to ``out``'s working log. A packed ``out``
    is unpacked first (unless a killed run left the log) and packed again at the end; the
    working copy is removed only once packing succeeded."""
    from ..measure import LocalBuilder, LocalRunner

    packed, log = Path(out), working_log(out)
    if log != packed and packed.exists() and not log.exists():
        unpack_records(packed, log)
    m = settings.measure
    builder = LocalBuilder(m.build_workers, m.build_timeout_s)
    runner = LocalRunner(m)
    writer = RecordWriter(log)
    try:
        yield builder, runner, writer
    finally:
        builder.close()
        runner.close()
        writer.close()
        if log != packed:
            pack_records(log, packed)
    if log != packed:
        log.unlink()


def resolve_tasks(specs: Sequence[str], target: dict,
                  on_model: Callable[[str], None] | None = None,
                  skip: Collection[str] = frozenset()) -> list[tuple[TaskInfo, Task]]:
    """Tasks for names: ``benchmark`` (the four benchmark operators), one benchmark operator's
    name, or a zoo model (its tunable conv2d / dense / matmul tasks, via ``extract_tasks``).
    A task met twice (the same fused function in two models) is kept once, under its first
    name; a task whose key is in ``skip`` (another dataset holds it) is left out.
    ``on_model(name)`` is called before a model is imported (it takes seconds)."""
    bench = benchmark_workloads()
    out: dict[str, tuple[TaskInfo, Task]] = {}
    for spec in specs:
        if spec == "benchmark" or spec in bench:
            for name, workload in bench.items():
                if spec in ("benchmark", name):
                    task = Task(workload, dict(target))
                    out.setdefault(task.key, (TaskInfo(task.key, name, op_kind(workload),
                                                       "benchmark"), task))
            continue
        from ..zoo import ZOO

        if spec not in ZOO:
            raise KeyError(f"unknown dataset task {spec!r}: use 'benchmark', one of "
                           f"{', '.join(bench)}, or a zoo model ({', '.join(sorted(ZOO))})")
        if on_model is not None:
            on_model(spec)
        for tune_task in _model_tasks(spec, target):
            task = tune_task.task
            info = TaskInfo(task.key, f"{spec}.{tune_task.name}", op_kind(task.workload), spec,
                            tune_task.weight)
            out.setdefault(task.key, (info, task))
    return [pair for key, pair in out.items() if key not in skip]


def _model_tasks(name: str, target: dict) -> list:
    from ..frontend import from_torch
    from ..tasks import extract_tasks
    from ..zoo import zoo_model

    module, inputs = zoo_model(name)
    tasks = extract_tasks(from_torch(module, inputs, name=name), target)
    return [t for t in tasks if t.tunable and op_kind(t.task.workload) in MODEL_OPS]


@dataclass(frozen=True)
class CollectedTask:
    """What collection did for one task."""

    name: str
    before: int  # measured (not invalid) records already in the file
    random: int  # random configs measured now
    guided: int  # XGBoost-guided configs measured now
    best_cost: float  # best in this run's measurements, inf if none


def collect_dataset(out: str | os.PathLike, tasks: Sequence[tuple[TaskInfo, Task]],
                    per_task: int, settings: Settings | None = None,
                    random_fraction: float = 0.5, features: str = "knob",
                    callbacks: Sequence[Callable[[MeasureInput, MeasureResult], None]] = (),
                    on_task: Callable[[TaskInfo, int], None] | None = None,
                    adopt: Sequence = ()) -> list[CollectedTask]:
    """Grow ``out`` to ``per_task`` measured configs per task: first random ones up to
    ``random_fraction`` of them, then XGBoost-guided ones (``features``) for the rest.

    An ``out`` ending in ``.gz`` is kept packed: collection appends to the uncompressed
    ``working_log(out)`` (flushed per measurement as always) and packs it when done.
    Records already in ``out`` count (invalid configs do not, as in tuning budgets) and are
    never measured again, so a re-run resumes and a larger ``per_task`` grows the dataset.
    ``adopt`` takes records measured elsewhere on this machine (e.g. a model's tuning log):
    those of the tasks collected here are copied in first and count like the dataset's own.
    One builder and one runner serve all tasks. ``on_task(info, before)`` is called as each
    task starts.
    """
    from ..space import task_space
    from ..tuner import BuildLimit, Evaluator, make_loop

    if per_task < 0:
        raise ValueError(f"per_task must be >= 0, got {per_task}")
    if not 0.0 <= random_fraction <= 1.0:
        raise ValueError(f"random_fraction must be in [0, 1], got {random_fraction}")
    settings = settings or Settings()
    write_manifest(out, [info for info, _ in tasks])
    history: dict[str, dict] = {}
    source = _latest(out)
    if source is not None:
        for rec in load_records(source):
            history.setdefault(rec.task_key, {}).setdefault(rec.config, rec.to_result())
    m = settings.measure
    summary = []
    with _measuring(out, settings) as (builder, runner, writer):
        wanted = {task.key for _, task in tasks}
        for rec in adopt:
            known = history.setdefault(rec.task_key, {})
            if rec.task_key in wanted and rec.config not in known:
                writer.write(rec)
                known[rec.config] = rec.to_result()
        for info, task in tasks:
            past = history.setdefault(task.key, {})
            before = sum(r.error is not ErrorKind.INVALID_CONFIG for r in past.values())
            if on_task is not None:
                on_task(info, before)
            best = [float("inf")]

            def keep(inp: MeasureInput, res: MeasureResult, past=past, best=best) -> None:
                past[inp.config] = res
                if res.ok:
                    best[0] = min(best[0], res.cost)

            space = task_space(task)
            done, spent = before, {}
            for tuner, goal in (("random", round(per_task * random_fraction)), ("xgb", per_task)):
                spent[tuner] = 0
                if goal - done <= 0:
                    continue
                loop = make_loop(tuner, space, settings, features)
                evaluator = Evaluator(task, builder, runner, goal - done,
                                      [writer.append, keep, *callbacks],
                                      [(c, r) for c, r in past.items() if c in space], m.verify,
                                      BuildLimit.from_settings(m))
                spent[tuner] = loop.run(evaluator).trials
                done += spent[tuner]
            summary.append(CollectedTask(info.name, before, spent["random"], spent["xgb"], best[0]))
    return summary


__all__ = ["resolve_tasks", "collect_dataset", "CollectedTask"]
