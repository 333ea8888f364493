"""Scores of a cost model on held-out tasks: per-task metrics and one evaluation's report.

Per task, over its successful test records: ``pearson`` (XFEATUR's metric) and ``spearman``
correlation of the model's score with the measured throughput, ``pairwise`` ranking accuracy,
and Tuna's top-k performance ratio for k = 10 and 50 (``topk_ratio``: summed cost of the k truly
fastest over that of the model's k favourites; ``None`` unless there are at least 2k records to
pick from). A report averages them over all its tasks and per source model.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..cost_model.base import normalized_throughput
from ..cost_model.metrics import pairwise_accuracy, pearson, spearman, topk_ratio
from ..dataset import TaskData

TOPK = (10, 50)
METRICS = ("pearson", "spearman", "pairwise") + tuple(f"top{k}" for k in TOPK)


@dataclass(frozen=True)
class TaskScore:
    """The metrics of one task's test records (``None``: not enough records for that metric)."""

    task: str
    op: str
    n_train: int
    n_test: int  # successful test records scored
    n_failed: int  # failed test records (not scored)
    pearson: float
    spearman: float
    pairwise: float
    topk: tuple[tuple[int, float | None], ...]
    note: str = ""
    source: str = ""  # the task's source model (TaskInfo.source)

    def metric(self, name: str) -> float | None:
        """The value of one of ``METRICS``."""
        if name.startswith("top"):
            return dict(self.topk).get(int(name[3:]))
        correlations = {"pearson": self.pearson, "spearman": self.spearman,
                        "pairwise": self.pairwise}
        if name not in correlations:
            raise ValueError(f"unknown metric {name!r}; known: {', '.join(METRICS)}")
        return correlations[name]

    def to_json(self) -> dict:
        out = {"task": self.task, "op": self.op, "source": self.source, "n_train": self.n_train,
               "n_test": self.n_test, "n_failed": self.n_failed}
        out.update({m: _round(self.metric(m)) for m in METRICS})
        if self.note:
            out["note"] = self.note
        return out


def score_task(data: TaskData, scores: np.ndarray, n_train: int, ks: Sequence[int] = TOPK,
               note: str = "") -> TaskScore:
    """Metrics of ``scores`` (one per record of ``data``) against its measurements."""
    ok = np.array([r.ok for r in data.results], dtype=bool)
    good = [r for r in data.results if r.ok]
    s = np.asarray(scores, dtype=float)[ok]
    thr = normalized_throughput(good)
    costs = np.array([r.cost for r in good])
    topk = tuple((k, topk_ratio(s, costs, k) if len(good) >= 2 * k else None) for k in ks)
    return TaskScore(data.name, data.info.op, n_train, len(good), int((~ok).sum()),
                     pearson(s, thr), spearman(s, thr), pairwise_accuracy(s, thr), topk, note,
                     data.info.source)


@dataclass(frozen=True)
class EvalReport:
    """One model x features evaluation: per-task scores, skipped tasks and timings."""

    model: str
    features: str
    split: str
    finetune: int
    scores: tuple[TaskScore, ...]
    skipped: tuple[tuple[str, str], ...] = ()  # (task, reason)
    fit_s: float = 0.0
    predict_s: float = 0.0
    extract_s: float = 0.0  # feature rows not cached yet, extracted before any fit
    predictions: dict = field(default_factory=dict, compare=False, repr=False)

    def mean(self) -> dict[str, float | None]:
        """Each metric averaged over the tasks that have it."""
        return _means(self.scores)

    def by_source(self) -> dict[str, dict]:
        """Per source model (in name order): its scored tasks' count and metric means; with the
        by-model split, how well the model did on each network it had never seen."""
        groups: dict[str, list[TaskScore]] = {}
        for s in self.scores:
            groups.setdefault(s.source, []).append(s)
        return {src: {"tasks": len(groups[src]), **_means(groups[src])} for src in sorted(groups)}

    def counts(self) -> dict[str, int]:
        """How many tasks each metric was averaged over: top-k needs 2k test records, so after
        fine-tuning it may cover only the larger tasks (and judge them on smaller pools)."""
        return {m: sum(s.metric(m) is not None for s in self.scores) for m in METRICS}

    def to_json(self) -> dict:
        return {"model": self.model, "features": self.features, "split": self.split,
                "finetune": self.finetune, "mean": {k: _round(v) for k, v in self.mean().items()},
                "counts": self.counts(),
                "by_source": {src: {k: v if k == "tasks" else _round(v) for k, v in means.items()}
                              for src, means in self.by_source().items()},
                "tasks": [s.to_json() for s in self.scores],
                "skipped": [{"task": t, "reason": r} for t, r in self.skipped],
                "extract_s": round(self.extract_s, 2), "fit_s": round(self.fit_s, 2),
                "predict_s": round(self.predict_s, 2)}


def _round(v):
    return None if v is None else round(float(v), 4)


def _means(scores: Sequence[TaskScore]) -> dict[str, float | None]:
    out = {}
    for m in METRICS:
        values = [v for v in (s.metric(m) for s in scores) if v is not None]
        out[m] = float(np.mean(values)) if values else None
    return out


__all__ = ["TOPK", "METRICS", "TaskScore", "score_task", "EvalReport"]
