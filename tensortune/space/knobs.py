"""Knobs: named sets of choices. A knob is a value; its candidates are fixed at definition."""
from __future__ import annotations

import dataclasses
from functools import lru_cache


@lru_cache(maxsize=None)
def factorizations(extent: int, parts: int) -> tuple[tuple[int, ...], ...]:
    """Every ordered tuple of ``parts`` positive ints whose product is ``extent``."""
    if parts == 1:
        return ((extent,),)
    out = []
    for d in range(1, extent + 1):
        if extent % d == 0:
            out.extend((d,) + rest for rest in factorizations(extent // d, parts - 1))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class SplitKnob:
    """Split a loop of ``extent`` into ``parts`` nested loops (outermost first)."""

    name: str
    extent: int
    parts: int
    max_inner: int = 0  # 0: no limit on the innermost factor

    @property
    def candidates(self) -> tuple[tuple[int, ...], ...]:
        cands = factorizations(self.extent, self.parts)
        if self.max_inner:
            cands = tuple(c for c in cands if c[-1] <= self.max_inner)
        return cands

    def encode(self, value) -> list:
        return list(value)

    def decode(self, raw) -> tuple[int, ...]:
        return tuple(int(x) for x in raw)


@dataclasses.dataclass(frozen=True)
class ChoiceKnob:
    """Pick one of a fixed tuple of options (ints, strings or bools)."""

    name: str
    options: tuple

    @property
    def candidates(self) -> tuple:
        return self.options

    def encode(self, value):
        return value

    def decode(self, raw):
        return raw


Knob = SplitKnob | ChoiceKnob
