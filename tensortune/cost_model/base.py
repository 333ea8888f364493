"""The cost-model contract and the training labels every model shares."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from ..measure.types import MeasureInput, MeasureResult


@runtime_checkable
class CostModel(Protocol):
    """Learns from measurements and scores unmeasured candidates (higher = predicted faster)."""

    def fit(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None: ...

    def predict(self, inputs: Sequence[MeasureInput]) -> np.ndarray: ...

    def save(self, path: str | Path) -> None: ...

    @classmethod
    def load(cls, path: str | Path, extractor=None) -> "CostModel": ...


def normalized_throughput(results: Sequence[MeasureResult]) -> np.ndarray:
    """``(1 / mean cost) / best`` for successful results, 0 for failures: labels in [0, 1]."""
    thr = np.array([1.0 / r.cost if r.ok and r.cost > 0 else 0.0 for r in results])
    best = thr.max(initial=0.0)
    return thr / best if best > 0 else thr


def pairwise_accuracy(scores: np.ndarray, truth: np.ndarray) -> float:
    """Fraction of pairs with different ``truth`` that ``scores`` order the same way."""
    scores, truth = np.asarray(scores, dtype=float), np.asarray(truth, dtype=float)
    dt = truth[:, None] - truth[None, :]
    ds = scores[:, None] - scores[None, :]
    mask = dt > 0
    total = int(mask.sum())
    return float((ds[mask] > 0).sum() / total) if total else 1.0
