"""The shell every model-guided strategy shares: ask an optimizer for the model's favourites,
then fill an epsilon share with random unexplored configs (exploration the model can't veto)."""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

from ..cost_model.base import as_cost_model
from ..measure.types import MeasureInput
from ..settings import SearchSettings
from ..space import Config, ConfigSpace
from .random_search import sample_unexplored

Optimizer = Callable[..., list[Config]]  # (space, score, n, exclude, rng, settings, seeds)


def propose_guided(optimize: Optimizer, space: ConfigSpace, model, task, n: int,
                   exclude: Collection[Config], rng: np.random.Generator,
                   settings: SearchSettings, seeds: Sequence[Config] = ()) -> list[Config]:
    """Up to ``n`` distinct configs outside ``exclude``: ``optimize``'s best under the model's
    scores, with a fraction ``settings.epsilon`` random. Without a model: all random.

    A model with a ``prescreen`` model (``cost_model.Prescreened``) is searched on the
    prescreen's scores; it then picks from the ``shortlist`` x as many best configs found."""
    if n <= 0:
        return []
    if model is None:
        return sample_unexplored(space, n, rng, exclude)
    model = as_cost_model(model)

    def scorer(m):
        def score(configs: list[Config]) -> np.ndarray:
            return np.asarray(m.predict([MeasureInput(task, c) for c in configs]), dtype=float)
        return score

    n_random = min(n, int(round(settings.epsilon * n)))
    n_best = n - n_random
    prescreen = model.prescreen
    if n_best <= 0:
        best = []
    elif prescreen is None:
        best = optimize(space, scorer(model), n_best, exclude, rng, settings, seeds)
    else:
        shortlist = optimize(space, scorer(prescreen), n_best * model.shortlist, exclude, rng,
                             settings, seeds)
        scores = scorer(model)(shortlist) if shortlist else np.zeros(0)
        best = [shortlist[i] for i in np.argsort(-scores, kind="stable")[:n_best]]
    taken = set(exclude) | set(best)
    return best + sample_unexplored(space, n - len(best), rng, taken)
