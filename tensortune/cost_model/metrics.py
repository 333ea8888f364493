"""How good is a cost model: correlation, ranking and top-k metrics, and a fit-and-score helper.

Scores follow the ``CostModel`` convention (higher = predicted faster); true values are either
throughputs (higher = faster) or costs in seconds (lower = faster), as each function says.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..measure.types import MeasureInput, MeasureResult
from .base import normalized_throughput, pairwise_accuracy


def pearson(pred, true) -> float:
    """Pearson correlation of two equal-length arrays; 0.0 when either is constant (or < 2 items),
    where the correlation is undefined."""
    x, y = _pair(pred, true)
    if len(x) < 2:
        return 0.0
    x, y = x - x.mean(), y - y.mean()
    denom = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / denom) if denom > 0 else 0.0


def spearman(pred, true) -> float:
    """Spearman rank correlation (Pearson of average ranks, so ties share a rank)."""
    x, y = _pair(pred, true)
    return pearson(_ranks(x), _ranks(y))


def topk_ratio(pred_scores, true_costs, k: int) -> float:
    """Tuna's top-k performance ratio, as best / picked so that 1.0 is perfect: the summed true
    cost of the ``k`` truly fastest candidates over the summed true cost of the ``k`` candidates
    the model scores highest. 0.0 if a pick failed (infinite cost)."""
    scores, costs = _pair(pred_scores, true_costs)
    if not 1 <= k <= len(costs):
        raise ValueError(f"k must be in 1..{len(costs)}, got {k}")
    picked = costs[np.argsort(-scores, kind="stable")[:k]].sum()
    best = np.sort(costs)[:k].sum()
    if not np.isfinite(picked):
        return 0.0
    return float(best / picked) if picked > 0 else 1.0


def evaluate_model(model, train_inputs: Sequence[MeasureInput],
                   train_results: Sequence[MeasureResult], test_inputs: Sequence[MeasureInput],
                   test_results: Sequence[MeasureResult], k: int = 10) -> dict:
    """Fit ``model`` on the training measurements, then score its predictions on the test set.

    Over the successful test measurements (throughput normalized to the best of each task):
    ``pearson`` (XFEATUR's metric) and ``spearman`` of score vs throughput, ``pairwise``
    accuracy, and ``topk`` ratio (best / picked, ``k`` capped at the number of successes);
    ``n_test`` successes and ``n_failed`` test failures are reported alongside.
    """
    if len(test_inputs) != len(test_results):
        raise ValueError(f"{len(test_inputs)} test inputs but {len(test_results)} results")
    model.fit(train_inputs, train_results)
    scores = np.asarray(model.predict(test_inputs), dtype=float)
    ok = np.array([r.ok for r in test_results], dtype=bool)
    throughput = np.zeros(len(test_results))
    for idx in _task_groups(test_inputs):
        throughput[idx] = normalized_throughput([test_results[i] for i in idx])
    costs = np.array([r.mean for r in test_results])
    s, t, c = scores[ok], throughput[ok], costs[ok]
    return {
        "pearson": pearson(s, t),
        "spearman": spearman(s, t),
        "pairwise": pairwise_accuracy(s, t),
        "topk": topk_ratio(s, c, min(k, len(c))) if len(c) else 0.0,
        "k": min(k, len(c)),
        "n_test": int(ok.sum()),
        "n_failed": int((~ok).sum()),
    }


def _pair(a, b) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"arrays of different lengths: {len(x)} and {len(y)}")
    return x, y


def _ranks(a: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1, tied values getting the mean of their ranks."""
    order = np.argsort(a, kind="stable")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(len(a), dtype=float)
    values, inverse = np.unique(a, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks, minlength=len(values))
    counts = np.bincount(inverse, minlength=len(values))
    return (sums / counts)[inverse]


def _task_groups(inputs: Sequence[MeasureInput]) -> list[list[int]]:
    groups: dict = {}
    for i, inp in enumerate(inputs):
        groups.setdefault(inp.task, []).append(i)
    return list(groups.values())


__all__ = ["pearson", "spearman", "pairwise_accuracy", "topk_ratio", "evaluate_model"]
