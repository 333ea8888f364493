"""Knob features: the config itself as numbers (split factors in log2, choice indices)."""
from __future__ import annotations

import numpy as np

from ..measure.types import MeasureInput
from ..space import ConfigSpace
from .base import CachedExtractor


class KnobFeatures(CachedExtractor):
    """``space.knob_vector(config)`` per input.

    Cheap (no TIR is built). With no ``space`` given, each task's space is defined on first use.
    The width depends on the space, so rows of different tasks do not mix.
    """

    name = "knob"

    def __init__(self, space: ConfigSpace | None = None, cache_size: int = 50_000):
        super().__init__(cache_size)
        self.space = space

    def empty_dim(self) -> int:
        return len(self.space.knob_vector(self.space.get(0))) if self.space is not None else 0

    def _compute(self, inp: MeasureInput) -> np.ndarray:
        space = self.space if self.space is not None else self.space_of(inp.task)
        return space.knob_vector(inp.config)
