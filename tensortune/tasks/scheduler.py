"""Share one trial budget across the tasks of a model.

``round-robin`` gives every live task a batch in turn. ``gradient`` follows Ansor's task
scheduler: after one warm-up batch each, it spends the next batch where the weighted objective
``sum_i weight_i * best_latency_i`` is expected to fall fastest, estimating each task's rate from
its recent improvement (backward) and an optimistic ``best / trials`` term (forward). Tasks that
stop improving for ``early_stop_trials`` trials, or whose space is exhausted, drop out.
Siblings, tasks of one space (the same loop nest with another epilogue: a convolution with
and without its residual add), share their bests: a task's new best is offered to each
sibling, measured first in its next batch, and counts in its expected gain. At a few dozen
trials a task, siblings otherwise end up to 2x apart (RegNet-Y's 440-channel 1x1
convolutions on Zen 3: 200 and 382 us).
With ``claims`` (``tasks.claims``, a service's jobs) a task another running job tunes is left
to it (``skipped``: "tuned by job ...").
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..measure.types import MeasureInput, MeasureResult
from ..settings import Settings
from ..space import Config, task_space
from ..tuner.evaluator import BuildLimit, Evaluator
from ..tuner.loop import TuneLoop, TuneResult, result_of
from ..tuner.stages import StageGen, drive, pipeline
from .claims import SHARED, Claimant

SCHEDULERS = ("gradient", "round-robin")


@dataclass
class TaskProgress:
    """One task under the scheduler: its loop, its evaluator and its weight in the model."""

    name: str
    weight: float
    loop: TuneLoop
    evaluator: Evaluator
    bests: list[float] = field(default_factory=list)  # best cost after each of its batches
    done: bool = False
    skipped: str = ""
    siblings: list["TaskProgress"] = field(default_factory=list)  # the tasks of its space
    hint: float = float("inf")  # the best cost of a config a sibling offered, not yet measured

    @property
    def best(self) -> float:
        return self.evaluator.best_cost


@dataclass
class ScheduleResult:
    """What a scheduled run did, per task and overall."""

    tasks: dict[str, TuneResult]
    skipped: dict[str, str]
    trials: int
    tune_s: float
    order: list[str]  # the task measured at each step
    confirmed: int = 0  # confirming timings made after the search (``tasks.confirm``)


class TaskScheduler:
    """Interleaves the tuning of many tasks through one builder, one runner and one log.

    ``tasks`` are ``(name, Task, weight)``; ``history`` maps a task key to earlier
    ``(Config, MeasureResult)`` pairs (warm start; those configs are not measured again). A task
    whose history already holds ``well_tuned`` trials is skipped.
    """

    def __init__(self, tasks: Sequence[tuple[str, object, float]], builder, runner,
                 settings: Settings, make_loop: Callable[[object], TuneLoop],
                 history: dict[str, list[tuple[Config, MeasureResult]]] | None = None,
                 callbacks: Sequence[Callable[[MeasureInput, MeasureResult], None]] = (),
                 strategy: str = "gradient", well_tuned: int = 0, seed: int = 0,
                 claims: Claimant | None = None):
        if strategy not in SCHEDULERS:
            raise ValueError(f"unknown task scheduler {strategy!r}; choose one of {', '.join(SCHEDULERS)}")
        self.strategy = strategy
        self.settings = settings
        self.claims = claims
        self.builder, self.runner = builder, runner
        self.rng = np.random.default_rng(seed)
        self.progress: list[TaskProgress] = []
        history = history or {}
        for name, task, weight in tasks:
            past = history.get(task.key, [])
            ev = Evaluator(task, builder, runner, budget=1 << 30, callbacks=callbacks,
                           history=past, verify=settings.measure.verify,
                           build_limit=BuildLimit.from_settings(settings.measure))
            prog = TaskProgress(name, float(weight), make_loop(task), ev)
            measured = sum(1 for _, r in past if r.error.value != "invalid_config")
            if well_tuned and measured >= well_tuned:
                prog.done, prog.skipped = True, f"already tuned ({measured} trials in the records)"
            self.progress.append(prog)
        groups: dict[tuple, list[TaskProgress]] = {}
        for prog in self.progress:
            groups.setdefault(prog.loop.space.signature(), []).append(prog)
        for group in groups.values():
            for prog in group:
                prog.siblings = [p for p in group if p is not prog]
        for prog in self.progress:  # bests from the records (a resumed run)
            self._share(prog)

    def run(self, trials: int, on_step: Callable[[TaskProgress, int], None] | None = None) -> ScheduleResult:
        """Spend up to ``trials`` measurements across the tasks."""
        return drive(self.stages(trials, on_step), self.builder, self.runner)

    def stages(self, trials: int, on_step: Callable[[TaskProgress, int], None] | None = None,
               ) -> StageGen:
        """``run`` as stage requests (``tuner.stages``); returns the ``ScheduleResult``.
        ``on_step(task, trials)`` follows every batch; returning True ends the schedule."""
        if self.claims is None:
            return (yield from self._stages(trials, on_step))
        for prog in self.progress:
            holder = "" if prog.done else self.claims.claim(prog.evaluator.task.key)
            if holder:
                prog.done, prog.skipped = True, SHARED + holder
        try:
            return (yield from self._stages(trials, on_step))
        finally:  # done, failed or cancelled (the generator closed): the tasks are free
            self.claims.release([p.evaluator.task.key for p in self.progress])

    def _stages(self, trials: int, on_step) -> StageGen:
        start = time.perf_counter()
        spent, order = 0, []
        batch = self.settings.search.batch_size
        # the warm-up round must leave most of a small budget to the scheduler's choices
        live_count = sum(not p.done for p in self.progress) or 1
        warmup = max(4, min(batch, trials // (2 * live_count)))
        stop = False
        if self.settings.search.stage_size:
            # under a multi-job scheduler: the warm-up batches two tasks at a time, one stage
            # apart, so one task measures while the next builds (they share no state)
            fresh = [p for p in self.progress if not p.done and not p.bests]
            sizes: list[int] = []

            def starts():
                for prog in fresh:
                    size = min(warmup, trials - spent - sum(sizes))
                    if stop or size <= 0:
                        return
                    sizes.append(size)
                    yield lambda prog=prog, size=size: prog.loop.stages(prog.evaluator, size,
                                                                        prog.name)

            def on_end(index: int, charged: int) -> None:
                nonlocal spent, stop
                spent, sizes[index] = spent + charged, 0
                stop = self._after(fresh[index], charged, order, on_step) or stop

            yield from pipeline(starts(), on_end)
        while spent < trials and not stop:
            live = [p for p in self.progress if not p.done]
            if not live:
                break
            prog = self._pick(live)
            size = batch if prog.bests else warmup
            charged = yield from prog.loop.stages(prog.evaluator, min(size, trials - spent),
                                                  prog.name)
            spent += charged
            stop = self._after(prog, charged, order, on_step)
        return ScheduleResult(
            {p.name: result_of(p.evaluator, p.loop.stalled(p.evaluator)) for p in self.progress},
            {p.name: p.skipped for p in self.progress if p.skipped}, spent,
            time.perf_counter() - start, order)

    def _after(self, prog: TaskProgress, charged: int, order: list[str], on_step) -> bool:
        """Bookkeeping after one of ``prog``'s batches; True when ``on_step`` ends the schedule
        (the caller has what it needs: a service's latency target is met)."""
        prog.bests.append(prog.best)
        prog.hint = float("inf")  # its batch measured what was offered
        order.append(prog.name)
        self._share(prog)
        if prog.loop.exhausted or prog.loop.stalled(prog.evaluator):
            prog.done = True
            if self.claims is not None:  # its result is in the records: a waiting job may go
                self.claims.release([prog.evaluator.task.key])
        return bool(on_step and on_step(prog, charged))

    @staticmethod
    def _share(prog: TaskProgress) -> None:
        """Offer ``prog``'s best config to its live siblings that have not measured it."""
        best = prog.evaluator.best_config
        if best is None:
            return
        for sib in prog.siblings:
            if not sib.done and best not in sib.evaluator.measured:
                sib.loop.offer([best])
                sib.hint = min(sib.hint, prog.best)

    def _pick(self, live: list[TaskProgress]) -> TaskProgress:
        fresh = [p for p in live if not p.bests]
        if fresh:
            return fresh[0]  # warm-up: one batch for every task first
        if self.strategy == "round-robin":
            return min(live, key=lambda p: len(p.bests))
        if self.rng.random() < 0.05:  # keep every task's estimate honest now and then
            return live[int(self.rng.integers(len(live)))]
        return max(live, key=self._gain)

    def _gain(self, p: TaskProgress) -> float:
        """Expected fall of ``weight * best latency`` per trial if ``p`` gets the next batch."""
        trials = max(1, p.evaluator.trials)
        best = p.best if np.isfinite(p.best) else 0.0
        if len(p.bests) >= 2 and np.isfinite(p.bests[-2]):
            backward = max(0.0, p.bests[-2] - p.bests[-1]) / max(1, self.settings.search.batch_size)
        else:
            backward = best / trials
        forward = best / trials
        if not np.isfinite(p.best):  # nothing valid yet: worth exploring
            return float("inf")
        # a sibling's best, offered and not yet measured here, is the likeliest gain of all
        offered = max(0.0, best - p.hint) / max(1, self.settings.search.batch_size)
        return p.weight * (0.5 * backward + 0.5 * forward + offered)


def history_by_task(records, tasks) -> dict[str, list[tuple[Config, MeasureResult]]]:
    """Group earlier records by task key, keeping only configs of each task's current space."""
    wanted = {t.key: t for t in tasks}
    spaces: dict[str, object] = {}
    out: dict[str, list[tuple[Config, MeasureResult]]] = {}
    for rec in records:
        task = wanted.get(rec.task_key)
        if task is None:
            continue
        space = spaces.get(task.key) or spaces.setdefault(task.key, task_space(task))
        if rec.config in space:
            out.setdefault(task.key, []).append((rec.config, rec.to_result()))
    return out
