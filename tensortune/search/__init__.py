"""Search strategies, by name: ``STRATEGIES``, the registry the tuner, the CLI (choices and help)
and the settings' validation read. Each entry is a ``base.Strategy`` (name, one-line summary,
declared options, ``propose``) declared in its own module; calling it proposes,
``strategy(space, model, task, n, exclude, rng, settings, seeds=())``, up to ``n`` distinct
configs not in ``exclude``. Adding one: docs/design.md, "Adding a strategy"."""
from . import annealing, evolution, genetic, grid, hill_climb, random_search
from .base import Option, Strategy, check_options
from .random_search import sample_unexplored

STRATEGIES: dict[str, Strategy] = {
    "random": random_search.STRATEGY,
    "grid": grid.STRATEGY,
    "sa": annealing.STRATEGY,
    "ga": genetic.STRATEGY,
    "es": evolution.STRATEGY,
    "hill": hill_climb.STRATEGY,
}

__all__ = ["STRATEGIES", "Option", "Strategy", "check_options", "sample_unexplored"]
