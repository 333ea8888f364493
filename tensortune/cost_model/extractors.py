"""What a cost model's owner needs of its feature extractor beyond ``extract``: the parts, those
that compile in worker processes, the schedule check, and stopping the workers.

``FeatureExtractor`` (``features.base``) declares ``name``, ``source``, ``version``,
``extract`` and ``close``. The rest is known by the extractor's type: ``ConcatFeatures`` has
parts, a ``CachedExtractor`` has workers and schedules; the two small protocols below also
admit an object that is no ``FeatureExtractor`` (a test's stand-in with ``close``).
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..features import CachedExtractor, ConcatFeatures, FeatureExtractor


@runtime_checkable
class Closable(Protocol):
    """An extractor holding resources (worker processes) until ``close``."""

    def close(self) -> None: ...


@runtime_checkable
class Derived(Protocol):
    """An extractor computed from another's rows (``roofline`` and ``ilp`` from ``hardware``)."""

    source: str
    hardware: FeatureExtractor


def parts(extractor: FeatureExtractor | None) -> tuple[FeatureExtractor, ...]:
    """The extractors side by side in ``extractor`` (itself when it is not a concatenation)."""
    if extractor is None:
        return ()
    return extractor.parts if isinstance(extractor, ConcatFeatures) else (extractor,)


def compiling(extractor: FeatureExtractor | None) -> list[CachedExtractor]:
    """The parts of ``extractor``, and the sources of derived parts, that compute their rows
    in worker processes (those that compile: ``hardware``, ``hardware_cuda``)."""
    out = []
    for part in parts(extractor):
        for ex in (part, part.hardware if isinstance(part, Derived) else None):
            if isinstance(ex, CachedExtractor) and ex.workers > 0:
                out.append(ex)
    return out


def schedule_check(extractor: FeatureExtractor | None):
    """``extractor.scheduled`` (the template applied once, kept for the features) where the
    extractor keeps schedules, else None."""
    return extractor.scheduled if isinstance(extractor, CachedExtractor) else None


def close(extractor: FeatureExtractor | None) -> None:
    """Stop ``extractor``'s worker processes, if it has any (they restart when needed)."""
    if isinstance(extractor, Closable):
        extractor.close()


def compiles(extractor: FeatureExtractor | None) -> bool:
    """Whether ``extractor``'s rows compile each candidate (a part in ``features.store.COSTLY``)."""
    from ..features.store import COSTLY

    return extractor is not None and any(p in COSTLY for p in extractor.name.split("+"))


__all__ = ["Closable", "Derived", "parts", "compiling", "schedule_check", "close", "compiles"]
