"""The shell every model-guided strategy shares: ask an optimizer for the model's favourites,
then fill an epsilon share with random unexplored configs (exploration the model can't veto)."""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

from ..measure.types import MeasureInput
from ..settings import SearchSettings
from ..space import Config, ConfigSpace
from .random_search import sample_unexplored

Optimizer = Callable[..., list[Config]]  # (space, score, n, exclude, rng, settings, seeds)


def propose_guided(optimize: Optimizer, space: ConfigSpace, model, task, n: int,
                   exclude: Collection[Config], rng: np.random.Generator,
                   settings: SearchSettings, seeds: Sequence[Config] = ()) -> list[Config]:
    """Up to ``n`` distinct configs outside ``exclude``: ``optimize``'s best under the model's
    scores, with a fraction ``settings.epsilon`` random. Without a model: all random."""
    if n <= 0:
        return []
    if model is None:
        return sample_unexplored(space, n, rng, exclude)

    def score(configs: list[Config]) -> np.ndarray:
        return np.asarray(model.predict([MeasureInput(task, c) for c in configs]), dtype=float)

    n_random = min(n, int(round(settings.epsilon * n)))
    best = optimize(space, score, n - n_random, exclude, rng, settings, seeds) if n > n_random else []
    taken = set(exclude) | set(best)
    return best + sample_unexplored(space, n - len(best), rng, taken)
