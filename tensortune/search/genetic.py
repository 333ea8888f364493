"""Genetic search on the cost model's scores (GTuner's and Ansor's model-guided evolution).

A population starts from ``seeds`` (best measured configs) topped up with random points. Each
generation keeps the ``ga_elite`` best-scoring distinct individuals unchanged (elitism) and
breeds the rest: two parents are picked by tournaments of ``ga_tournament`` random individuals
(the higher model score wins), the child takes every knob from one parent or the other
(uniform crossover), and with probability ``ga_mutation`` it also takes one ``space.neighbor``
step. Every generation is scored with one ``predict`` call over the individuals not scored
before. The result is the ``n`` best-scoring distinct configs met in any generation that are
not in ``exclude``, with a fraction ``epsilon`` replaced by random unexplored configs.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

from ..settings import SearchSettings
from ..space import Config, ConfigSpace
from .base import Strategy, setting
from .guided import propose_guided

OPTIONS = {
    "population": setting("ga_population", "individuals per generation"),
    "generations": setting("ga_generations", "generations bred"),
    "elite": setting("ga_elite", "best individuals kept unchanged"),
    "tournament": setting("ga_tournament", "individuals per parent-picking tournament"),
    "mutation": setting("ga_mutation", "chance that a child also takes one neighbour step"),
}


def propose(space: ConfigSpace, model, task, n: int, exclude: Collection[Config],
            rng: np.random.Generator, settings: SearchSettings,
            seeds: Sequence[Config] = ()) -> list[Config]:
    """Up to ``n`` distinct configs not in ``exclude``: the model's favourites found by evolving
    a population from ``seeds`` and random points, with a fraction ``settings.epsilon`` replaced
    by random unexplored configs. Without a model: random."""
    return propose_guided(evolve, space, model, task, n, exclude, rng, settings, seeds)


STRATEGY = Strategy("ga", "genetic algorithm, GTuner's and Ansor's", propose, OPTIONS,
                    guided=True)


def evolve(space: ConfigSpace, score: Callable[[list[Config]], np.ndarray], n: int,
           exclude: Collection[Config], rng: np.random.Generator, settings: SearchSettings,
           seeds: Sequence[Config] = ()) -> list[Config]:
    """The ``n`` highest-scoring distinct configs outside ``exclude`` met by the evolution,
    best first."""
    if n <= 0:
        return []
    size = max(2, settings.ga_population)
    elite = min(max(0, settings.ga_elite), size)
    scored: dict[Config, float] = {}

    def evaluate(configs: list[Config]) -> np.ndarray:
        missing = list(dict.fromkeys(c for c in configs if c not in scored))
        if missing:  # one model call per generation, for the individuals not scored before
            scored.update(zip(missing, (float(s) for s in score(missing))))
        return np.array([scored[c] for c in configs])

    population = [c for c in dict.fromkeys(seeds) if c in space][:size]
    population += space.sample_many(size - len(population), rng, frozenset(population))
    fitness = evaluate(population)
    for _ in range(max(0, settings.ga_generations)):
        order = np.argsort(-fitness, kind="stable")
        children = dict.fromkeys(population[i] for i in order[:elite])
        # a converged population breeds copies; a bounded number of tries keeps it finite
        for _ in range(4 * size):
            if len(children) >= size:
                break
            a = _tournament(fitness, settings.ga_tournament, rng)
            b = _tournament(fitness, settings.ga_tournament, rng)
            child = crossover(space, population[a], population[b], rng)
            if rng.random() < settings.ga_mutation:
                child = space.neighbor(child, rng)
            children.setdefault(child)
        if len(children) < size:  # fresh blood instead of duplicates
            children.update(dict.fromkeys(space.sample_many(size - len(children), rng,
                                                            frozenset(children))))
        population = list(children)
        fitness = evaluate(population)
    ranked = sorted(((s, i, c) for i, (c, s) in enumerate(scored.items()) if c not in exclude),
                    key=lambda t: (-t[0], t[1]))
    return [c for _, _, c in ranked[:n]]


def crossover(space: ConfigSpace, a: Config, b: Config, rng: np.random.Generator) -> Config:
    """A child taking each knob's value from ``a`` or ``b`` with equal chance."""
    da, db = space.digits(a), space.digits(b)
    pick = rng.random(len(da)) < 0.5
    return space.from_digits([x if p else y for x, y, p in zip(da, db, pick)])


def _tournament(fitness: np.ndarray, size: int, rng: np.random.Generator) -> int:
    """The index of the fittest of ``size`` individuals drawn at random (with replacement)."""
    entrants = rng.integers(len(fitness), size=max(1, size))
    return int(entrants[np.argmax(fitness[entrants])])
