"""The tuning loop: propose a batch, measure it through the evaluator, refit the model, repeat."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..measure.types import MeasureInput
from ..settings import SearchSettings
from ..space import Config, ConfigSpace
from .evaluator import Evaluator


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


class TuneLoop:
    """Wires a proposer (``propose(space, model, task, n, exclude, rng, settings, seeds)``) to an
    optional cost model. With no model the proposer is a plain strategy (random, grid)."""

    def __init__(self, space: ConfigSpace, propose, model=None,
                 settings: SearchSettings = SearchSettings(), seed: int = 0):
        self.space = space
        self.propose = propose
        self.model = model
        self.settings = settings
        self.rng = np.random.default_rng(seed)

    def run(self, evaluator: Evaluator) -> TuneResult:
        s = self.settings
        self._refit(evaluator)
        stalled_rounds = 0
        stopped_early = False
        while evaluator.remaining > 0:
            n = min(s.batch_size, evaluator.remaining)
            exclude = evaluator.measured
            if self.model is not None and not self._model_ready(evaluator):
                batch = self.space.sample_many(n, self.rng, exclude)  # cold start: explore
            else:
                batch = self.propose(self.space, self.model, evaluator.task, n, exclude, self.rng, s,
                                     seeds=evaluator.top(8))
            before = evaluator.trials
            measured = evaluator.evaluate(batch)
            if not measured:
                break  # the strategy has nothing left to offer (e.g. grid exhausted)
            stalled_rounds = stalled_rounds + 1 if evaluator.trials == before else 0
            if stalled_rounds >= 5:
                break  # only invalid configs for several rounds: the space is exhausted here
            self._refit(evaluator)
            if s.early_stop_trials and evaluator.trials - evaluator.best_trial >= s.early_stop_trials:
                stopped_early = True
                break
        return TuneResult(evaluator.best_config, evaluator.best_cost, evaluator.trials,
                          evaluator.invalid, dict(evaluator.errors), evaluator.elapsed_s,
                          list(evaluator.curve), stopped_early)

    def _model_ready(self, evaluator: Evaluator) -> bool:
        return sum(r.ok for r in evaluator.results.values()) >= 4

    def _refit(self, evaluator: Evaluator) -> None:
        if self.model is None or not self._model_ready(evaluator):
            return
        configs = list(evaluator.results)
        inputs = [MeasureInput(evaluator.task, c) for c in configs]
        self.model.fit(inputs, [evaluator.results[c] for c in configs])
