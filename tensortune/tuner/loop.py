"""The tuning loop: propose a batch, measure it through the evaluator, refit the model, repeat."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..cost_model.base import CostModel, as_cost_model
from ..measure.types import MeasureInput
from ..settings import SearchSettings
from ..space import Config, ConfigSpace
from .evaluator import Evaluator
from .stages import BUILD, MEASURE, PROPOSE, UPDATE, Stage, StageGen, drive


@dataclass
class TuneResult:
    """What one tuning run found."""

    best_config: Config | None
    best_cost: float  # seconds; inf if nothing ran
    trials: int
    invalid: int
    errors: dict[str, int]
    tune_s: float
    curve: list[tuple[int, float]] = field(default_factory=list)
    stopped_early: bool = False


STALL_PROPOSALS = 128  # invalid configs in a row before a loop gives up


class TuneLoop:
    """Wires a proposer (a ``search.Strategy``, or any function ``propose(space, model, task, n,
    exclude, rng, settings, seeds)``) to an optional cost model (a ``CostModel``; another
    object with ``fit`` and ``predict`` is ``Adapted``). With no model the proposer is a plain
    strategy (random, grid).

    ``step`` measures one batch, so a scheduler can interleave many tasks; ``run`` steps until
    the evaluator's budget is spent, the space is exhausted or the task stops improving.
    """

    def __init__(self, space: ConfigSpace, propose, model=None,
                 settings: SearchSettings = SearchSettings(), seed: int = 0,
                 seeds: Sequence[Config] = ()):
        self.space = space
        self.propose = propose
        self.model: CostModel | None = as_cost_model(model)
        self.settings = settings
        self.rng = np.random.default_rng(seed)
        # the template's starting points (``space.task_seeds``): measured before anything else
        self.seeds = [c for c in seeds if c in space]
        self._stalled_rounds = self._stalled_proposals = 0
        self._seeds_ranked = False
        self.offered: list[Config] = []  # ``offer``'s configs: before the seeds, unranked
        self._fitted_on = -1
        self.exhausted = False

    def step(self, evaluator: Evaluator, n: int | None = None) -> int:
        """Measure up to ``n`` (default: one batch) new configs; the number charged."""
        return drive(self.stages(evaluator, n), evaluator.builder, evaluator.runner)

    def stages(self, evaluator: Evaluator, n: int | None = None, task: str = "") -> StageGen:
        """``step`` as stage requests (``tuner.stages``): update the model, propose a batch,
        build it, measure it; returns the number charged."""
        if (self.model is not None and self._fitted_on != len(evaluator.results)
                and self._model_ready(evaluator)):
            yield Stage(UPDATE, lambda _: self._refit(evaluator), task=task)
        n = min(n or self.settings.batch_size, evaluator.remaining)
        if n <= 0 or self.exhausted:
            return 0
        batch = yield Stage(PROPOSE, lambda _: self._propose(evaluator, n), n, task)
        inputs = evaluator.admit(batch)
        measured = []
        before = evaluator.trials
        size = self.settings.stage_size or len(inputs)
        if inputs:
            parts = [inputs[i:i + size] for i in range(0, len(inputs), size)]
            measured = yield from self._build_and_measure(evaluator, parts, task)
        charged = evaluator.trials - before
        stalled = bool(measured) and not charged
        self._stalled_rounds = self._stalled_rounds + 1 if stalled else 0
        self._stalled_proposals = self._stalled_proposals + len(inputs) if stalled else 0
        # nothing new to offer (grid exhausted), or only invalid configs for several rounds and
        # STALL_PROPOSALS of them (rounds of a few configs each can miss a sparse valid part)
        self.exhausted = not measured or (self._stalled_rounds >= 5
                                          and self._stalled_proposals >= STALL_PROPOSALS)
        return charged

    @staticmethod
    def _build_and_measure(evaluator: Evaluator, parts: list[list[MeasureInput]],
                           task: str) -> StageGen:
        """Build and measure ``parts`` of a batch: part k is measured while part k+1 builds
        (a group of stages that a scheduler may run at once)."""
        def build(part):
            limit = evaluator.build_timeout()
            return Stage(BUILD, lambda builder: builder.build(part, limit), len(part), task)

        def measure(part, builds):
            return Stage(MEASURE, lambda runner: evaluator.measure(part, builds, runner),
                         len(part), task)

        measured = []
        builds = yield build(parts[0])
        evaluator.built(builds)
        for k, part in enumerate(parts):
            if k + 1 < len(parts):
                results, next_builds = yield measure(part, builds), build(parts[k + 1])
                evaluator.built(next_builds)
            else:
                results, next_builds = (yield measure(part, builds)), None
            measured += evaluator.record(part, results)
            builds = next_builds
        return measured

    def _propose(self, evaluator: Evaluator, n: int) -> list[Config]:
        exclude = evaluator.measured
        pending = [c for c in self.offered if c not in exclude]
        offered, self.offered = pending[:n], pending[n:]
        exclude = exclude | set(offered)
        self._rank_seeds(evaluator, n - len(offered))
        left = [c for c in self.seeds if c not in exclude]
        first, self.seeds = left[:n - len(offered)], left[n - len(offered):]
        first = offered + first
        exclude = exclude | set(first)
        rest = n - len(first)
        # cold start: explore, unless the model was trained before (pretrained on other tasks)
        if rest <= 0:
            batch = []
        elif (self.model is not None and not self._model_ready(evaluator)
              and not self.model.trained):
            batch = self.space.sample_many(rest, self.rng, exclude)
        else:
            batch = self.propose(self.space, self.model, evaluator.task, rest, exclude, self.rng,
                                 self.settings, seeds=evaluator.top(8))
        return first + list(batch)

    def offer(self, configs: Sequence[Config]) -> None:
        """Measure ``configs`` (those in the space) first when this loop next proposes: the
        best of a task that shares its space (``tasks.scheduler``)."""
        for c in configs:
            if c in self.space and c not in self.offered:
                self.offered.append(c)

    def stalled(self, evaluator: Evaluator) -> bool:
        """True once the task went ``early_stop_trials`` trials without a new best."""
        s = self.settings
        return bool(s.early_stop_trials) and evaluator.trials - evaluator.best_trial >= s.early_stop_trials

    def run(self, evaluator: Evaluator) -> TuneResult:
        return drive(self.run_stages(evaluator), evaluator.builder, evaluator.runner)

    def run_stages(self, evaluator: Evaluator, task: str = "") -> StageGen:
        """``run`` as stage requests: step until the budget is spent, the space exhausted or
        the task stalled; returns the ``TuneResult``."""
        stopped_early = False
        while evaluator.remaining > 0 and not self.exhausted:
            yield from self.stages(evaluator, task=task)
            if self.stalled(evaluator):
                stopped_early = True
                break
        return result_of(evaluator, stopped_early)

    def _rank_seeds(self, evaluator: Evaluator, n: int) -> None:
        """With a model trained before this task (pretrained), measure the seeds it rates best
        first: at a few trials per task the seeds are all a task gets, and template order knows
        nothing of this task. Ranked on the cheap prescreen where there is one (no compiling)."""
        ranker = None if self.model is None else self.model.prescreen or self.model
        if self._seeds_ranked or len(self.seeds) <= n or ranker is None or not ranker.trained:
            return
        self._seeds_ranked = True
        scores = np.asarray(ranker.predict([MeasureInput(evaluator.task, c) for c in self.seeds]))
        order = np.argsort(-scores, kind="stable")
        self.seeds = [self.seeds[i] for i in order]

    def _model_ready(self, evaluator: Evaluator) -> bool:
        return sum(r.ok for r in evaluator.results.values()) >= 4

    def _refit(self, evaluator: Evaluator) -> None:
        if not self._model_ready(evaluator):
            return
        configs = list(evaluator.results)
        inputs = [MeasureInput(evaluator.task, c) for c in configs]
        self.model.fit(inputs, [evaluator.results[c] for c in configs])
        self._fitted_on = len(evaluator.results)


def result_of(evaluator: Evaluator, stopped_early: bool = False) -> TuneResult:
    """The ``TuneResult`` summarizing what ``evaluator`` has measured so far."""
    return TuneResult(evaluator.best_config, evaluator.best_cost, evaluator.trials,
                      evaluator.invalid, dict(evaluator.errors), evaluator.elapsed_s,
                      list(evaluator.curve), stopped_early)
