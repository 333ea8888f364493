"""Time each heavy task's best few configs again, in turn, and keep the steadiest.

A task's recorded best is the luckiest of a hundred noisy timings (the winner's curse). On a
shared host the recorded best of BERT-base's second FFN layer, timed again beside the next
eleven, ran 7-10% slower than the third best, and so did the best of DeiT-S's two FFN layers
(docs/benchmarks.md). After a model's tuning, the ``confirm_top`` best distinct configs of each
task that takes part in ``confirm_share`` of the tuned latency (weight x best cost) are built
again and timed ``confirm_rounds`` times, all of a task's configs in each round, so that a
burst of neighbour load falls on them alike. Each timing is recorded with ``confirm=True``, and
``records.best_record`` ranks a task that has such records by their median alone.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..measure.types import MeasureInput, MeasureResult
from ..records import Record, records_for
from ..settings import SearchSettings
from ..space import Config, task_space
from ..tuner.stages import BUILD, CONFIRM, MEASURE, Stage, StageGen


@dataclass(frozen=True)
class Candidates:
    """One task's configs to confirm, fastest recorded first."""

    name: str
    task: object
    configs: tuple[Config, ...]


def candidates(tasks: Sequence[tuple[str, object, float]], records: Sequence[Record],
               settings: SearchSettings) -> list[Candidates]:
    """For ``tasks`` as ``(name, Task, weight)``: the heaviest ones, each with its
    ``confirm_top`` best distinct configs by their first timings; a task with fewer than two
    such configs has nothing to choose between and is left out."""
    if settings.confirm_rounds <= 0 or settings.confirm_top < 2:
        return []
    found = []
    for name, task, weight in tasks:
        space = task_space(task)
        ok = sorted((r for r in records_for(records, task)
                     if r.ok and not r.confirm and r.config in space), key=lambda r: r.cost)
        configs: list[Config] = []
        for r in ok:
            if r.config not in configs:
                configs.append(r.config)
            if len(configs) == settings.confirm_top:
                break
        if len(configs) >= 2:
            found.append((weight * ok[0].cost, Candidates(name, task, tuple(configs))))
    found.sort(key=lambda x: -x[0])
    total = sum(cost for cost, _ in found)
    chosen, covered = [], 0.0
    for cost, cand in found:
        if covered >= settings.confirm_share * total:
            break
        chosen.append(cand)
        covered += cost
    return chosen


def confirm_stages(chosen: Sequence[Candidates], rounds: int,
                   record: Callable[[MeasureInput, MeasureResult], None]) -> StageGen:
    """Build each task's candidates once, then time them ``rounds`` times in turn, handing
    every result to ``record``; returns how many timings were made."""
    timed = 0
    for cand in chosen:
        inputs = [MeasureInput(cand.task, c) for c in cand.configs]
        label = CONFIRM + cand.name  # its timings are no trials (``counts_as_trials``)
        builds = yield Stage(BUILD, lambda builder, inputs=inputs: builder.build(inputs),
                             size=len(inputs), task=label)
        for _ in range(rounds):
            results = yield Stage(
                MEASURE, lambda runner, inputs=inputs, builds=builds: runner.run(
                    inputs, builds, verify=[False] * len(inputs)),
                size=len(inputs), task=label)
            for inp, res in zip(inputs, results, strict=True):
                record(inp, res)
                timed += 1
    return timed
