"""``ConfigSpace``: the product of a template's knobs, with indexing, sampling and moves."""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from .config import Config
from .knobs import Knob


class InvalidConfigError(ValueError):
    """A config that is not a point of the space, or that its template cannot apply."""


class ConfigSpace:
    """An ordered set of knobs; configs are addressed by a mixed-radix index."""

    def __init__(self, knobs: Iterable[Knob]):
        self.knobs: tuple[Knob, ...] = tuple(knobs)
        names = [k.name for k in self.knobs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate knob names in {names}")
        self._cands = [k.candidates for k in self.knobs]
        empty = [k.name for k, c in zip(self.knobs, self._cands) if not c]
        if empty:
            raise ValueError(f"knobs with no candidates: {empty}")
        self._lookup = [{v: i for i, v in enumerate(c)} for c in self._cands]
        self.radices = tuple(len(c) for c in self._cands)

    @property
    def size(self) -> int:
        """The number of configs (may exceed what ``len()`` can return, 2**63)."""
        return math.prod(self.radices)

    def __len__(self) -> int:
        return self.size

    def __repr__(self):
        return f"ConfigSpace({len(self.knobs)} knobs, size={self.size:.3g})"

    def signature(self) -> tuple:
        """Knob names and candidates: spaces with one signature take the same configs (the
        same loop nest, its epilogue aside: ``tasks.scheduler``'s siblings)."""
        return tuple((k.name, c) for k, c in zip(self.knobs, self._cands))

    # -- index <-> config -----------------------------------------------------------------------
    def get(self, index: int) -> Config:
        if not 0 <= index < self.size:
            raise IndexError(f"config index {index} outside space of size {self.size}")
        values = {}
        for knob, cands, radix in zip(self.knobs, self._cands, self.radices):
            index, digit = divmod(index, radix)
            values[knob.name] = cands[digit]
        return Config(values)

    def digits(self, config: Config) -> tuple[int, ...]:
        """Per-knob candidate indices of ``config``; raises ``InvalidConfigError`` if foreign."""
        out = []
        for knob, lookup in zip(self.knobs, self._lookup):
            if knob.name not in config:
                raise InvalidConfigError(f"config lacks knob {knob.name!r}")
            value = config[knob.name]
            if value not in lookup:
                raise InvalidConfigError(f"knob {knob.name!r} has no candidate {value!r}")
            out.append(lookup[value])
        extra = set(config) - {k.name for k in self.knobs}
        if extra:
            raise InvalidConfigError(f"config has unknown knob(s) {sorted(extra)}")
        return tuple(out)

    def index(self, config: Config) -> int:
        idx = 0
        for digit, radix in reversed(list(zip(self.digits(config), self.radices))):
            idx = idx * radix + digit
        return idx

    def from_digits(self, digits) -> Config:
        return Config({k.name: c[d] for k, c, d in zip(self.knobs, self._cands, digits)})

    def __contains__(self, config) -> bool:
        try:
            self.digits(config)
            return True
        except InvalidConfigError:
            return False

    # -- sampling and moves ------------------------------------------------------------------------
    def sample(self, rng: np.random.Generator) -> Config:
        return self.from_digits([int(rng.integers(r)) for r in self.radices])

    def sample_many(self, n: int, rng: np.random.Generator, exclude=frozenset()) -> list[Config]:
        """Up to ``n`` distinct random configs not in ``exclude``."""
        out: dict[Config, None] = {}
        for _ in range(max(20 * n, 100)):
            if len(out) >= n:
                break
            c = self.sample(rng)
            if c not in exclude:
                out[c] = None
        return list(out)

    def neighbor(self, config: Config, rng: np.random.Generator) -> Config:
        """Change one knob: a split moves a factor between two of its parts, a choice is re-drawn."""
        digits = list(self.digits(config))
        movable = [i for i, r in enumerate(self.radices) if r > 1]
        if not movable:
            return config
        i = movable[int(rng.integers(len(movable)))]
        knob = self.knobs[i]
        value = self._cands[i][digits[i]]
        if isinstance(value, tuple) and len(value) > 1 and rng.random() < 0.7:
            moved = _move_factor(value, rng)
            if moved in self._lookup[i]:
                digits[i] = self._lookup[i][moved]
                return self.from_digits(digits)
        choice = int(rng.integers(self.radices[i] - 1))
        digits[i] = choice if choice < digits[i] else choice + 1
        del knob
        return self.from_digits(digits)

    def knob_vector(self, config: Config) -> np.ndarray:
        """A numeric view for cost models: split factors (log2) and choice indices."""
        vec = []
        for knob, cands, d in zip(self.knobs, self._cands, self.digits(config)):
            v = cands[d]
            if isinstance(v, tuple):
                vec.extend(math.log2(x) for x in v)
            else:
                vec.append(float(d))
        return np.asarray(vec, dtype=np.float32)


def _move_factor(value: tuple[int, ...], rng) -> tuple[int, ...]:
    """Move one prime factor from one part to another (a local move in tile-size space)."""
    parts = list(value)
    src_choices = [i for i, x in enumerate(parts) if x > 1]
    if not src_choices:
        return value
    src = src_choices[int(rng.integers(len(src_choices)))]
    p = _smallest_prime_factor(parts[src])
    dst = int(rng.integers(len(parts) - 1))
    dst = dst if dst < src else dst + 1
    parts[src] //= p
    parts[dst] *= p
    return tuple(parts)


def _smallest_prime_factor(n: int) -> int:
    for p in range(2, int(math.isqrt(n)) + 1):
        if n % p == 0:
            return p
    return n
