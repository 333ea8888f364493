"""Evolution strategies on the cost model's scores (Tuna's search, seed 001, algorithm 4).

Each knob's choice is relaxed to a coordinate in [0, 1) (a choice of ``r`` candidates covers
``r`` equal intervals), so a config is a point ``theta`` and the search distribution a Gaussian
around it. Each generation samples ``es_population`` perturbations ``eps`` of every one of
``es_starts`` points (antithetic pairs ``+eps``/``-eps``), decodes and scores all of them with
one ``predict`` call (the work Tuna spreads over cores), and moves each point along
``lr / (n sigma) * sum F_i eps_i``, with ``F`` the perturbations' centred ranks (fitness shaping,
so the step does not depend on the model's scale). Starts are the ``seeds`` (best measured or
expert configs) and random points. The result is the ``n`` best-scoring distinct configs met,
outside ``exclude``, with a fraction ``epsilon`` replaced by random unexplored configs.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

from ..settings import SearchSettings
from ..space import Config, ConfigSpace
from .annealing import _TopN
from .base import Strategy, setting
from .guided import propose_guided

OPTIONS = {
    "starts": setting("es_starts", "search distributions evolved side by side"),
    "population": setting("es_population", "perturbations per start and generation"),
    "generations": setting("es_generations", "generations"),
    "sigma": setting("es_sigma", "noise, in units of a knob's whole range"),
    "lr": setting("es_lr", "step size"),
}


def propose(space: ConfigSpace, model, task, n: int, exclude: Collection[Config],
            rng: np.random.Generator, settings: SearchSettings,
            seeds: Sequence[Config] = ()) -> list[Config]:
    """Up to ``n`` distinct configs not in ``exclude``: the model's favourites found by
    evolution strategies from ``seeds`` and random points (see the module docstring)."""
    return propose_guided(evolve, space, model, task, n, exclude, rng, settings, seeds)


STRATEGY = Strategy("es", "evolution strategies, Tuna's", propose, OPTIONS, guided=True)


def evolve(space: ConfigSpace, score: Callable[[list[Config]], np.ndarray], n: int,
           exclude: Collection[Config], rng: np.random.Generator, settings: SearchSettings,
           seeds: Sequence[Config] = ()) -> list[Config]:
    """The ``n`` highest-scoring distinct configs outside ``exclude`` met, best first."""
    if n <= 0:
        return []
    radices = np.array(space.radices, dtype=float)
    top = _TopN(n, exclude)
    cache: dict[Config, float] = {}

    def evaluate(configs: list[Config]) -> np.ndarray:
        missing = list(dict.fromkeys(c for c in configs if c not in cache))
        if missing:
            cache.update(zip(missing, (float(s) for s in score(missing))))
        return np.array([cache[c] for c in configs])

    def decode(theta: np.ndarray) -> Config:
        digits = np.clip(np.floor(theta * radices), 0, radices - 1).astype(int)
        return space.from_digits(digits)

    starts = max(1, settings.es_starts)
    known = [c for c in dict.fromkeys(seeds) if c in space][:starts]
    known += space.sample_many(starts - len(known), rng, frozenset(known))
    theta = np.array([(np.array(space.digits(c)) + 0.5) / radices for c in known])
    top.offer(known, evaluate(known))
    half = max(1, settings.es_population // 2)
    sigma = settings.es_sigma
    for _ in range(max(0, settings.es_generations)):
        eps = rng.standard_normal((len(theta), half, len(radices)))
        eps = np.concatenate([eps, -eps], axis=1)  # antithetic pairs halve the variance
        points = np.clip(theta[:, None, :] + sigma * eps, 0.0, 1.0 - 1e-9)
        configs = [decode(p) for row in points for p in row]
        fitness = evaluate(configs).reshape(len(theta), -1)
        top.offer(configs, fitness.ravel())
        for s in range(len(theta)):
            ranks = np.argsort(np.argsort(fitness[s])) / max(1, fitness.shape[1] - 1) - 0.5
            step = settings.es_lr / (fitness.shape[1] * sigma) * ranks @ eps[s]
            theta[s] = np.clip(theta[s] + step, 0.0, 1.0 - 1e-9)
    return top.best()
