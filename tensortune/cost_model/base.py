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


LABELS = ("relative", "absolute")


def task_flops(task) -> int:
    """FLOPs of one call of ``task``'s workload, 0 when TVM cannot estimate them."""
    try:
        return int(task.workload.flops)
    except Exception:  # estimate_tir_flops refuses some non-arithmetic functions
        return 0


def throughput_labels(results: Sequence[MeasureResult], flops: int, label: str) -> np.ndarray:
    """Training labels of one task's results: ``relative`` is ``normalized_throughput``
    (AutoTVM's); ``absolute`` is TFLOP/s, which means the same on every task, so a model
    pretrained on other tasks needs not guess how fast a new task's best config will be.
    Without a FLOP count (``flops`` <= 0) absolute labels fall back to relative ones."""
    if label == "relative" or (label == "absolute" and flops <= 0):
        return normalized_throughput(results)
    if label == "absolute":
        return np.array([flops / r.cost / 1e12 if r.ok and r.cost > 0 else 0.0 for r in results])
    raise ValueError(f"unknown label {label!r}; choose one of {', '.join(LABELS)}")


def scale_labels(y: np.ndarray) -> np.ndarray:
    """``y`` over its largest value (unchanged when none is positive): one factor for all tasks,
    so ratios between tasks survive while the labels come to [0, 1]."""
    top = float(np.max(y, initial=0.0))
    return y / top if top > 0 else y


def pairwise_accuracy(scores: np.ndarray, truth: np.ndarray) -> float:
    """Fraction of pairs with different ``truth`` that ``scores`` order the same way."""
    scores, truth = np.asarray(scores, dtype=float), np.asarray(truth, dtype=float)
    dt = truth[:, None] - truth[None, :]
    ds = scores[:, None] - scores[None, :]
    mask = dt > 0
    total = int(mask.sum())
    return float((ds[mask] > 0).sum() / total) if total else 1.0
