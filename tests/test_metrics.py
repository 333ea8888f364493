"""Cost-model metrics on hand-computed inputs, and evaluate_model with a stub model."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensortune.cost_model.metrics import (evaluate_model, pairwise_accuracy, pearson, spearman,
                                           topk_ratio)
from tensortune.measure.types import ErrorKind, MeasureInput, MeasureResult
from tensortune.space import Config
from tensortune.workload import Matmul, Task

TASK = Task(Matmul(m=8, n=8, k=8), {"kind": "llvm"})
OTHER = Task(Matmul(m=16, n=8, k=8), {"kind": "llvm"})


def test_pearson_known_values():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # deviations (-1.5, -.5, .5, 1.5) and (-1.5, .5, -.5, 1.5): 4 / sqrt(5 * 5)
    assert pearson([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert pearson(np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 1.0])) == 0.0  # undefined
    assert pearson([1.0], [2.0]) == 0.0
    with pytest.raises(ValueError, match="different lengths"):
        pearson([1, 2], [1, 2, 3])


def test_spearman_uses_ranks_and_averages_ties():
    assert spearman([1, 2, 3, 4], [1, 10, 100, 1000]) == pytest.approx(1.0)  # monotone, not linear
    assert spearman([1, 2, 3, 4], [8, 4, 2, 1]) == pytest.approx(-1.0)
    # ranks (0, 1.5, 1.5, 3) vs (0, 1, 2, 3): 4.5 / sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))


def test_pairwise_accuracy_counts_correctly_ordered_pairs():
    truth = np.array([1.0, 2.0, 3.0])
    assert pairwise_accuracy(np.array([10.0, 20.0, 30.0]), truth) == 1.0
    assert pairwise_accuracy(np.array([3.0, 2.0, 1.0]), truth) == 0.0
    assert pairwise_accuracy(np.array([2.0, 1.0, 3.0]), truth) == pytest.approx(2 / 3)


def test_topk_ratio_is_best_over_picked():
    costs = np.array([1.0, 2.0, 3.0, 4.0])
    assert topk_ratio(-costs, costs, 1) == 1.0  # perfect ranking
    assert topk_ratio(-costs, costs, 2) == 1.0
    assert topk_ratio(costs, costs, 2) == pytest.approx((1 + 2) / (3 + 4))  # picks the slowest
    assert topk_ratio(np.array([0.0, 1.0, 0.0, 0.0]), costs, 1) == pytest.approx(1 / 2)
    assert topk_ratio(np.array([0.0, 0.0, 0.0, 1.0]), np.array([1, 2, 3, np.inf]), 1) == 0.0
    assert topk_ratio(-costs, costs, 4) == 1.0  # every candidate picked
    for k in (0, 5):
        with pytest.raises(ValueError, match="k must be"):
            topk_ratio(-costs, costs, k)


class Oracle:
    """Predicts the true throughput of the configs (``x`` = seconds) after recording its fit."""

    def __init__(self):
        self.fitted = None

    def fit(self, inputs, results):
        self.fitted = (list(inputs), list(results))

    def predict(self, inputs):
        return np.array([1.0 / i.config["x"] for i in inputs])


def measured(task, seconds):
    inputs = [MeasureInput(task, Config(x=s)) for s in seconds]
    return inputs, [MeasureResult((s,)) for s in seconds]


def test_evaluate_model_fits_then_scores_successful_test_measurements():
    train_x, train_y = measured(TASK, [1.0, 2.0])
    test_x, test_y = measured(TASK, [1.0, 2.0, 4.0, 8.0])
    failed_x = MeasureInput(TASK, Config(x=0.5))
    test_x.append(failed_x)
    test_y.append(MeasureResult((), ErrorKind.TIMEOUT))
    model = Oracle()
    report = evaluate_model(model, train_x, train_y, test_x, test_y, k=2)
    assert model.fitted == (train_x, train_y)
    assert report["pearson"] == pytest.approx(1.0)  # scores are exactly the throughputs
    assert report["spearman"] == pytest.approx(1.0) and report["pairwise"] == 1.0
    assert report["topk"] == 1.0 and report["k"] == 2
    assert (report["n_test"], report["n_failed"]) == (4, 1)


def test_evaluate_model_normalizes_throughput_per_task():
    # two tasks whose costs differ 10x: per-task labels are (1, .5) in both, which the
    # oracle's raw throughputs (1, .5, .1, .05) do not follow linearly
    test_x, test_y = measured(TASK, [1.0, 2.0])
    other_x, other_y = measured(OTHER, [10.0, 20.0])
    report = evaluate_model(Oracle(), [], [], test_x + other_x, test_y + other_y, k=10)
    assert report["k"] == 4 and report["n_test"] == 4
    assert report["pearson"] == pytest.approx(pearson([1, 0.5, 0.1, 0.05], [1, 0.5, 1, 0.5]))
    assert report["pearson"] < 0.6
    with pytest.raises(ValueError, match="test inputs"):
        evaluate_model(Oracle(), [], [], test_x, test_y[:1])
