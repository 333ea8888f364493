"""Hill climbing on the cost model's scores: a greedy local search from the best measured configs.

``climbers`` climbs run side by side, from the ``seeds`` (the best configs measured so far)
and, where there are fewer seeds, from random points. Each step tries ``neighbors`` random
one-knob moves (``space.neighbor``) of every climber, scores them all with one ``predict``
call, and moves each climber to its best move when that scores higher than where it stands; a
climber with no better move is at a local optimum and starts again from a random point. After
``steps`` steps the ``n`` best-scoring distinct configs met outside ``exclude`` are the result,
with a fraction ``epsilon`` replaced by random unexplored configs (``guided.propose_guided``).

Greedier than annealing and the evolutionary searches: it refines what measurement has found
already, where they spread out.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

from ..settings import SearchSettings
from ..space import Config, ConfigSpace
from .annealing import _TopN
from .base import Option, Strategy
from .guided import propose_guided

OPTIONS = {
    "climbers": Option(8, "climbs side by side, from the best measured configs first"),
    "neighbors": Option(16, "random one-knob moves tried per climber and step"),
    "steps": Option(20, "steps of every climber"),
}


def propose(space: ConfigSpace, model, task, n: int, exclude: Collection[Config],
            rng: np.random.Generator, settings: SearchSettings,
            seeds: Sequence[Config] = ()) -> list[Config]:
    """Up to ``n`` distinct configs not in ``exclude``: the model's favourites met climbing
    from ``seeds`` (see the module docstring). Without a model: random."""
    return propose_guided(climb, space, model, task, n, exclude, rng, settings, seeds)


def climb(space: ConfigSpace, score: Callable[[list[Config]], np.ndarray], n: int,
          exclude: Collection[Config], rng: np.random.Generator, settings: SearchSettings,
          seeds: Sequence[Config] = ()) -> list[Config]:
    """The ``n`` highest-scoring distinct configs outside ``exclude`` met, best first."""
    if n <= 0:
        return []
    options = STRATEGY.values(settings)
    top = _TopN(n, exclude)
    cache: dict[Config, float] = {}

    def evaluate(configs: list[Config]) -> np.ndarray:
        missing = list(dict.fromkeys(c for c in configs if c not in cache))
        if missing:  # one model call per step, for the moves not scored before
            cache.update(zip(missing, (float(s) for s in score(missing))))
        return np.array([cache[c] for c in configs], dtype=float)

    climbers = max(1, options["climbers"])
    tries = max(1, options["neighbors"])
    points = [c for c in dict.fromkeys(seeds) if c in space][:climbers]
    points += space.sample_many(climbers - len(points), rng, frozenset(points))
    here = evaluate(points)
    top.offer(points, here)
    for _ in range(max(0, options["steps"])):
        moves = [space.neighbor(p, rng) for p in points for _ in range(tries)]
        scores = evaluate(moves).reshape(len(points), tries)
        top.offer(moves, scores.ravel())
        stuck = []
        for i, best in enumerate(scores.argmax(axis=1)):
            if scores[i, best] > here[i]:
                points[i], here[i] = moves[i * tries + best], scores[i, best]
            else:
                stuck.append(i)
        # climbers at a local optimum start again elsewhere
        fresh = space.sample_many(len(stuck), rng, frozenset(points)) if stuck else []
        if fresh:
            fresh_scores = evaluate(fresh)
            top.offer(fresh, fresh_scores)
            for i, config, s in zip(stuck, fresh, fresh_scores):
                points[i], here[i] = config, s
    return top.best()


STRATEGY = Strategy("hill", "hill climbing from the best measured configs", propose, OPTIONS,
                    guided=True)
