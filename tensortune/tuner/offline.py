"""Tuning for a device this process cannot reach: propose and build a batch now, time it later.

``propose_batch`` is one round of the tuning loop cut at the measurement: the tuner resumes
from a records log (the results imported from earlier batches train its cost model), proposes,
builds, records what failed to build, and returns the built candidates for export
(``measure.cuda_export``). ``python -m tensortune.device_runner`` times them where the GPU is
and ``tensortune measure import`` appends the results to the log, so the next round learns from
them, exactly as ``tune_task`` resumes a killed run.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from ..measure.types import BuildResult, ErrorKind, MeasureInput, MeasureResult
from ..records import RecordWriter, load_records, records_for
from ..settings import Settings
from ..space import task_seeds, task_space
from ..workload import Task
from .api import make_loop
from .evaluator import BuildLimit, Evaluator
from .stages import BUILD, MEASURE

# proposals per round at most: most configs of a GPU space break a per-block limit, so a round
# may propose several times to fill its batch with ones that build
MAX_PROPOSALS = 30


class _Held:
    """A runner that times nothing: it keeps the batch that reached the measurement."""

    def __init__(self):
        self.inputs: list = []
        self.builds: list = []

    def run(self, inputs, builds, verify=None):
        self.inputs, self.builds = list(inputs), list(builds)
        return [MeasureResult((), ErrorKind.DEVICE_ERROR, "held for export")] * len(inputs)


def propose_batch(task: Task, n: int, log: str | Path, builder, tuner: str = "xgb",
                  features: str = "knob", settings: Settings | None = None,
                  search: str = "sa") -> list[tuple[MeasureInput, BuildResult]]:
    """Up to ``n`` new built candidates of ``task`` that ``tuner`` picks after learning from
    ``log``; candidates that fail to build are appended to ``log`` as errors (never proposed
    again) and do not count towards ``n``."""
    settings = settings or Settings()
    # one proposal for the whole batch, built in one piece
    search_settings = dataclasses.replace(settings.search, batch_size=n, stage_size=0)
    settings = dataclasses.replace(settings, search=search_settings)
    space = task_space(task)
    seeds = task_seeds(task, space) if settings.search.seeds else ()
    loop = make_loop(tuner, space, settings, features, search=search, seeds=seeds)
    history = []
    if Path(log).exists():
        history = [(r.config, r.to_result()) for r in records_for(load_records(log), task)
                   if r.config in space]
    out: list[tuple[MeasureInput, BuildResult]] = []
    with RecordWriter(log) as writer:
        evaluator = Evaluator(task, builder, None, budget=n * MAX_PROPOSALS,
                              callbacks=[writer.append], history=history,
                              build_limit=BuildLimit.from_settings(settings.measure))
        for _ in range(MAX_PROPOSALS):
            if len(out) >= n or loop.exhausted:
                break
            held = _held_batch(loop, evaluator, builder, n - len(out))
            if held is None:
                break
            failed = [(i, b) for i, b in zip(*held) if b.error is not ErrorKind.NONE]
            evaluator.record([i for i, _ in failed],
                             [MeasureResult((), b.error, b.message, build_s=b.build_s,
                                            timestamp=time.time()) for _, b in failed])
            for inp, build in zip(*held):
                if build.error is ErrorKind.NONE:
                    evaluator.pending.add(inp.config)
                    out.append((inp, build))
    for m in (loop.model, getattr(loop.model, "prescreen", None)):
        getattr(getattr(m, "extractor", None), "close", lambda: None)()
    return out


def _held_batch(loop, evaluator: Evaluator, builder, n: int):
    """Run one step of ``loop`` up to its measurement; (inputs, builds) or None if it proposed
    nothing."""
    gen = loop.stages(evaluator, n)
    held = _Held()
    try:
        stage = next(gen)
        while stage.kind != MEASURE:
            stage = gen.send(stage.run(builder if stage.kind == BUILD else None))
    except StopIteration:
        return None
    stage.run(held)
    gen.close()  # the step ends here: nothing is recorded for the held candidates
    return held.inputs, held.builds


def best_batch(task: Task, k: int, log: str | Path,
               builder) -> list[tuple[MeasureInput, BuildResult]]:
    """The ``k`` fastest configs of ``task`` in ``log``, rebuilt: to time them again (another
    GPU, a final comparison beside other libraries)."""
    ranked = sorted((r for r in records_for(load_records(log), task) if r.ok),
                    key=lambda r: r.cost) if Path(log).exists() else []
    inputs = [MeasureInput(task, r.config) for r in ranked[:k]]
    builds = builder.build(inputs) if inputs else []
    return [(i, b) for i, b in zip(inputs, builds) if b.error is ErrorKind.NONE]
