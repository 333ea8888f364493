"""Search strategies. Each is ``propose(space, model, task, n, exclude, rng, settings, seeds=())``
returning up to ``n`` distinct configs not in ``exclude``."""
from . import annealing, evolution, genetic, grid, random_search
from .random_search import sample_unexplored

STRATEGIES = {"random": random_search.propose, "grid": grid.propose, "sa": annealing.propose,
              "ga": genetic.propose, "es": evolution.propose}

__all__ = ["STRATEGIES", "sample_unexplored", "annealing", "evolution", "genetic", "grid", "random_search"]
