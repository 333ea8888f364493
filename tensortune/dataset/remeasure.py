"""Re-timing a dataset: ``remeasure_dataset`` times its configs again in later sessions, in a
shuffled order, so that ``load_dataset`` pools host noise out of each config's cost.

    remeasure_dataset("data/cpu.jsonl.gz", sessions=2, settings=settings)

Records are appended and flushed per measurement, so a killed run resumes where it stopped.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..measure.types import MeasureInput, MeasureResult
from ..settings import Settings
from .base import load_dataset, record_sessions
from .collect import _latest, _measuring


@dataclass(frozen=True)
class RemeasuredTask:
    """What re-timing did for one task."""

    name: str
    configs: int  # successful configs of the task
    timed: int  # timings done now
    failed: int  # of those, timings that ended in an error
    spearman: float | None  # rank agreement of the new timings with the configs' earlier cost
    top10: float | None  # the earlier costs' top-10 ratio if the new timings picked the 10


def remeasure_dataset(path: str | os.PathLike, sessions: int = 2, settings: Settings | None = None,
                      names: Sequence[str] = (), batch: int = 8,
                      callbacks: Sequence[Callable[[MeasureInput, MeasureResult], None]] = (),
                      on_task: Callable[[str, int], None] | None = None) -> list[RemeasuredTask]:
    """Time every successful config of ``path`` (or of the tasks ``names``) again until it has
    ``sessions`` records, appending each new record; ``load_dataset`` pools them.

    Host noise comes in bursts longer than one candidate's repeats, so repeats taken in one
    session share it; a later session in a shuffled order does not. Each task's configs are
    built ``batch`` at a time, then timed (never both at once). Configs whose records hold an
    error are left alone. ``on_task(name, todo)`` is called as each task starts.
    """
    if sessions < 1:
        raise ValueError(f"sessions must be >= 1, got {sessions}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    settings = settings or Settings()
    source = _latest(path)
    if source is None:
        raise FileNotFoundError(f"no such dataset: {path}")
    dataset = load_dataset(source)
    tasks = dataset.select(names) if names else dataset  # a bad name fails before any change
    timed = record_sessions(source)
    rng = np.random.default_rng(settings.seed)
    summary = []
    with _measuring(path, settings) as (builder, runner, writer):
        for data in tasks:
            key = data.task.key
            todo = [i for i, r in enumerate(data.results)
                    if r.ok and len(timed[(key, data.inputs[i].config)]) < sessions]
            # a shuffled order, so slow drift of the host is not tied to the first session's order
            todo = [todo[j] for j in rng.permutation(len(todo))]
            if on_task is not None:
                on_task(data.name, len(todo))
            new: dict[int, MeasureResult] = {}
            for start in range(0, len(todo), batch):
                chunk = todo[start:start + batch]
                inputs = [data.inputs[i] for i in chunk]
                results = runner.run(inputs, builder.build(inputs), verify=[False] * len(chunk))
                for i, inp, res in zip(chunk, inputs, results):
                    writer.append(inp, res)
                    for callback in callbacks:
                        callback(inp, res)
                    new[i] = res
            summary.append(RemeasuredTask(data.name, data.n_ok, len(new),
                                          sum(not r.ok for r in new.values()),
                                          *_agreement(data.results, new)))
    return summary


def _agreement(before: Sequence[MeasureResult], new: dict[int, MeasureResult]
               ) -> tuple[float | None, float | None]:
    """How well the new timings agree with the earlier costs: Spearman (None under 3 pairs),
    and Tuna's top-10 ratio of the earlier costs with the new timings as the "model" (None
    under 20 pairs) -- the score a perfect cost model would get against one session's noise."""
    from ..cost_model.metrics import spearman, topk_ratio

    pairs = [(before[i].cost, r.cost) for i, r in new.items() if r.ok]
    if len(pairs) < 3:
        return None, None
    earlier, now = np.array(pairs).T
    top10 = float(topk_ratio(-now, earlier, 10)) if len(pairs) >= 20 else None
    return float(spearman(earlier, now)), top10


__all__ = ["remeasure_dataset", "RemeasuredTask"]
