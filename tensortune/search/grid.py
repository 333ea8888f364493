"""Grid search: configs in index order, skipping those already measured."""
from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from ..settings import SearchSettings
from ..space import Config, ConfigSpace
from .base import Strategy


def propose(space: ConfigSpace, model, task, n: int, exclude: Collection[Config],
            rng: np.random.Generator, settings: SearchSettings,
            seeds: Sequence[Config] = ()) -> list[Config]:
    """The first ``n`` configs by index that are not in ``exclude`` (deterministic)."""
    out: list[Config] = []
    index, size = 0, space.size
    while len(out) < n and index < size:
        config = space.get(index)
        if config not in exclude:
            out.append(config)
        index += 1
    return out


STRATEGY = Strategy("grid", "configs in index order, no model", propose)
