"""Simulated annealing on the cost model's scores (AutoTVM's model-based search).

Many chains walk the space in parallel with ``space.neighbor`` moves; each step scores all
chains' moves with one ``predict`` call. A move that lowers the score is still taken with
probability ``exp(delta / (T * spread))``, where the temperature ``T`` falls linearly from
``sa_t_start`` to ``sa_t_end`` and ``spread`` is the range of scores seen so far, so the schedule
does not depend on the model's scale. The best distinct unexplored configs seen on any chain are
kept; a run ends after ``sa_steps`` or once that set has not changed for ``sa_early_stop`` steps,
and ``sa_restarts`` further runs start from fresh random points.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Sequence

import numpy as np

from ..settings import SearchSettings
from ..space import Config, ConfigSpace
from .base import Strategy, setting
from .guided import propose_guided

OPTIONS = {
    "chains": setting("sa_chains", "chains walking side by side"),
    "steps": setting("sa_steps", "steps per run"),
    "early_stop": setting("sa_early_stop", "end a run after this many steps without a change "
                                           "in the best configs found (0: never)"),
    "restarts": setting("sa_restarts", "further runs from fresh random points"),
    "t_start": setting("sa_t_start", "temperature at the first step"),
    "t_end": setting("sa_t_end", "temperature at the last step"),
}


def propose(space: ConfigSpace, model, task, n: int, exclude: Collection[Config],
            rng: np.random.Generator, settings: SearchSettings,
            seeds: Sequence[Config] = ()) -> list[Config]:
    """Up to ``n`` distinct configs not in ``exclude``: the model's favourites found by annealing
    from ``seeds`` (best measured configs) and random points, with a fraction
    ``settings.epsilon`` replaced by random unexplored configs. Without a model: random."""
    return propose_guided(anneal, space, model, task, n, exclude, rng, settings, seeds)


STRATEGY = Strategy("sa", "simulated annealing, AutoTVM's", propose, OPTIONS, guided=True)


def anneal(space: ConfigSpace, score: Callable[[list[Config]], np.ndarray], n: int,
           exclude: Collection[Config], rng: np.random.Generator, settings: SearchSettings,
           seeds: Sequence[Config] = ()) -> list[Config]:
    """The ``n`` highest-scoring distinct configs outside ``exclude`` met by the chains, best first."""
    if n <= 0:
        return []
    top = _TopN(n, exclude)
    cache: dict[Config, float] = {}

    def evaluate(configs: list[Config]) -> np.ndarray:
        missing = list(dict.fromkeys(c for c in configs if c not in cache))
        if missing:  # one model call per step, for the moves not scored before
            cache.update(zip(missing, (float(s) for s in score(missing))))
        return np.array([cache[c] for c in configs])

    chains = max(1, settings.sa_chains)
    steps = max(0, settings.sa_steps)
    for run in range(1 + max(0, settings.sa_restarts)):
        starts = [c for c in dict.fromkeys(seeds) if c in space][:chains] if run == 0 else []
        starts += space.sample_many(chains - len(starts), rng, frozenset(starts))
        points = starts
        scores = evaluate(points)
        top.offer(points, scores)
        lo, hi = float(scores.min()), float(scores.max())
        stale = 0
        for step in range(steps):
            frac = step / max(1, steps - 1)
            temp = settings.sa_t_start + (settings.sa_t_end - settings.sa_t_start) * frac
            moves = [space.neighbor(p, rng) for p in points]
            new = evaluate(moves)
            lo, hi = min(lo, float(new.min())), max(hi, float(new.max()))
            delta = new - scores
            scale = temp * (hi - lo)
            accept = delta >= 0
            if scale > 0:
                accept |= rng.random(len(delta)) < np.exp(np.minimum(delta / scale, 0.0))
            points = [m if a else p for m, p, a in zip(moves, points, accept)]
            scores = np.where(accept, new, scores)
            stale = 0 if top.offer(moves, new) else stale + 1
            if settings.sa_early_stop and stale >= settings.sa_early_stop:
                break
    return top.best()


class _TopN:
    """The ``n`` best distinct configs offered so far, excluding a fixed set."""

    def __init__(self, n: int, exclude: Collection[Config]):
        self.n = n
        self.exclude = exclude
        self.items: dict[Config, float] = {}

    def offer(self, configs: Sequence[Config], scores: np.ndarray) -> bool:
        """Add candidates; True if the membership of the top set changed."""
        before = set(self.items)
        for config, s in zip(configs, scores):
            if config not in self.items and config not in self.exclude:
                self.items[config] = float(s)
        if len(self.items) > self.n:
            self.items = dict(heapq.nlargest(self.n, self.items.items(), key=lambda kv: kv[1]))
        return set(self.items) != before

    def best(self) -> list[Config]:
        return [c for c, _ in sorted(self.items.items(), key=lambda kv: -kv[1])]
