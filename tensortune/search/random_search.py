"""Random search: uniform samples of the space, ignoring any cost model."""
from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from ..settings import SearchSettings
from ..space import Config, ConfigSpace
from .base import Strategy

# below this size an exhausted-looking space is enumerated instead of sampled
ENUMERATE_MAX = 200_000


def propose(space: ConfigSpace, model, task, n: int, exclude: Collection[Config],
            rng: np.random.Generator, settings: SearchSettings,
            seeds: Sequence[Config] = ()) -> list[Config]:
    """Up to ``n`` distinct uniformly random configs not in ``exclude``."""
    return sample_unexplored(space, n, rng, exclude)


STRATEGY = Strategy("random", "uniform random configs, no model", propose)


def sample_unexplored(space: ConfigSpace, n: int, rng: np.random.Generator,
                      exclude: Collection[Config] = frozenset()) -> list[Config]:
    """Up to ``n`` distinct random configs not in ``exclude``.

    Rejection sampling first; when that comes up short (a small or nearly exhausted space) the
    remaining indices of a small space are enumerated, so the last few configs are still found.
    """
    if n <= 0:
        return []
    out = space.sample_many(n, rng, exclude)
    if len(out) >= n or space.size > ENUMERATE_MAX:
        return out[:n]
    taken = {space.index(c) for c in exclude if c in space} | {space.index(c) for c in out}
    left = np.array([i for i in range(space.size) if i not in taken], dtype=np.int64)
    if left.size == 0:
        return out
    picks = rng.choice(left, size=min(n - len(out), left.size), replace=False)
    return out + [space.get(int(i)) for i in picks]
