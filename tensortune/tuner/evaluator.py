"""The one door every strategy goes through: de-duplicate, batch, build, run, record, budget."""
from __future__ import annotations

import functools
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..measure.types import BuildResult, ErrorKind, MeasureInput, MeasureResult
from ..space import Config
from ..workload import Task

Callback = Callable[[MeasureInput, MeasureResult], None]

# a result of these kinds was compiled, so its ``build_s`` says how long a build of it takes
_BUILT = (ErrorKind.NONE, ErrorKind.RUNTIME_ERROR, ErrorKind.WRONG_RESULT, ErrorKind.DEVICE_ERROR)


@dataclass(frozen=True)
class BuildLimit:
    """How long one build of a task may take: ``factor`` x the median of the task's builds so
    far, within ``[floor_s, ceiling_s]``; ``ceiling_s`` until ``min_builds`` are known.

    The builds far slower than their task's usual are unrolled giants (8-10 s against a 0.1 s
    median on a 24->72 channel conv2d, their kernels 10-17x slower than the best): cutting them
    short leaves the build core to candidates worth timing."""

    ceiling_s: float
    factor: float = 10.0
    floor_s: float = 3.0
    # two builds already tighten a model task's warm-up batch of four (over the repository's
    # records, two, three or four lose the same one task's best)
    min_builds: int = 2

    @staticmethod
    def from_settings(m) -> "BuildLimit":
        """The limit that ``MeasureSettings`` ``m`` asks for."""
        return BuildLimit(m.build_timeout_s, m.build_timeout_factor, m.build_timeout_floor_s)

    def seconds(self, build_times: Sequence[float]) -> float:
        if len(build_times) < self.min_builds:
            return self.ceiling_s
        return min(self.ceiling_s, max(self.floor_s, self.factor * statistics.median(build_times)))


def _limit_with(limit: BuildLimit, known: list[float], batch: Sequence[float]) -> float:
    return limit.seconds([*known, *batch])


class Evaluator:
    """Measures configs of one task within a trial budget.

    ``history`` holds results known before this run (from records); those configs are never
    measured again and don't count against the budget. Invalid configs are recorded and never
    proposed again but are not charged either: the budget counts candidates that were built.
    With ``build_limit`` each batch's builds get the time that limit gives this task (a build
    past it is recorded as a timeout); without, the builder's own limit.
    """

    def __init__(self, task: Task, builder, runner, budget: int,
                 callbacks: Sequence[Callback] = (), history: Iterable[tuple[Config, MeasureResult]] = (),
                 verify: str = "all", build_limit: BuildLimit | None = None):
        self.task = task
        self.builder = builder
        self.runner = runner
        self.budget = budget
        self.callbacks = list(callbacks)
        self.verify = verify
        self.build_limit = build_limit
        self.results: dict[Config, MeasureResult] = dict(history)
        # handed to a device whose results are not back yet (an exported batch): never
        # proposed again, not charged, not learned from
        self.pending: set[Config] = set()
        # how long this task's builds took: known from the history, then from each build
        self.build_times = [r.build_s for r in self.results.values()
                            if r.error in _BUILT and r.build_s > 0]
        self.trials = 0
        self.invalid = 0
        self.errors: Counter = Counter()
        self.started = time.perf_counter()
        self.best_config: Config | None = None
        self.best_cost = float("inf")
        self.best_trial = 0
        self.curve: list[tuple[int, float]] = []  # (trial, best cost so far) after each new best
        for cfg, res in self.results.items():
            self._consider_best(cfg, res, trial=0)

    @property
    def remaining(self) -> int:
        return max(0, self.budget - self.trials)

    @property
    def measured(self) -> set[Config]:
        return set(self.results) | self.pending

    def evaluate(self, configs: Iterable[Config]) -> list[tuple[Config, MeasureResult]]:
        """Measure the new configs among ``configs`` (in order) up to the remaining budget."""
        inputs = self.admit(configs)
        if not inputs:
            return []
        builds = self.builder.build(inputs, self.build_timeout())
        self.built(builds)
        return self.record(inputs, self.measure(inputs, builds))

    def built(self, builds: Sequence[BuildResult]) -> None:
        """Note how long ``builds`` took, before they are measured: the next part of a batch
        may build while this one is timed."""
        self.build_times += [b.build_s for b in builds if b.error is ErrorKind.NONE and b.build_s > 0]

    def build_timeout(self) -> Callable[[Sequence[float]], float] | None:
        """The next batch's limit per build, as a function of the build times that batch has
        seen so far (so a first batch tightens as it goes); None: the builder's own limit."""
        if self.build_limit is None:
            return None
        return functools.partial(_limit_with, self.build_limit, list(self.build_times))

    # The three parts of ``evaluate``, so a scheduler can run the build and the measurement
    # as separate stages on resources of its choosing (``tuner.stages``).
    def admit(self, configs: Iterable[Config]) -> list[MeasureInput]:
        """The candidates worth measuring: new configs, de-duplicated, within the budget."""
        fresh: list[Config] = []
        seen = self.measured
        for cfg in configs:
            if cfg not in seen:
                seen.add(cfg)
                fresh.append(cfg)
        return [MeasureInput(self.task, cfg) for cfg in fresh[: self.remaining]]

    def measure(self, inputs: list[MeasureInput], builds: list[BuildResult],
                runner=None) -> list[MeasureResult]:
        """Time built candidates on ``runner`` (default: this evaluator's); with ``verify``
        ``best`` a candidate that beats the best so far is run again, checked."""
        runner = runner or self.runner
        results = runner.run(inputs, builds, verify=[self.verify == "all"] * len(inputs))
        if self.verify != "best":
            return results
        best, out = self.best_cost, []
        for inp, build, res in zip(inputs, builds, results):
            if res.ok and res.cost < best and not res.verified:
                res = runner.run([inp], [build], verify=[True])[0]
            if res.ok:
                best = min(best, res.cost)
            out.append(res)
        return out

    def record(self, inputs: list[MeasureInput],
               results: list[MeasureResult]) -> list[tuple[Config, MeasureResult]]:
        """Charge, remember and report (callbacks: records logs) measured candidates."""
        out = []
        for inp, res in zip(inputs, results, strict=True):
            if res.error is ErrorKind.INVALID_CONFIG:
                self.invalid += 1
            else:
                self.trials += 1
            if res.error is not ErrorKind.NONE:
                self.errors[res.error.value] += 1
            self.results[inp.config] = res
            self._consider_best(inp.config, res, self.trials)
            for cb in self.callbacks:
                cb(inp, res)
            out.append((inp.config, res))
        return out

    def _consider_best(self, cfg: Config, res: MeasureResult, trial: int) -> None:
        if res.ok and res.cost < self.best_cost:
            self.best_cost, self.best_config, self.best_trial = res.cost, cfg, trial
            self.curve.append((trial, res.cost))

    def top(self, k: int) -> list[Config]:
        """The ``k`` fastest measured configs (seeds for model-guided search)."""
        good = sorted((r.cost, i, c) for i, (c, r) in enumerate(self.results.items()) if r.ok)
        return [c for _, _, c in good[:k]]

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started
