"""The cost-model contract and the training labels every model shares."""
from __future__ import annotations

import json
import os
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


# -- files of models made of models (Prescreened, EnsembleModel) --------------------------------------

def write_parts(path: Path, models: dict, doc: dict) -> None:
    """Save each of ``models`` (role -> model) beside ``path`` as ``<path>.<role>`` and write
    ``doc`` plus ``{"parts": {role: {"class", "file"}}}`` at ``path``, atomically."""
    parts = {}
    for role, model in models.items():
        file = path.with_name(f"{path.name}.{role}")
        model.save(file)
        parts[role] = {"class": type(model).__name__, "file": file.name}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({**doc, "parts": parts}))
    os.replace(tmp, path)


def read_parts(path: Path, fmt: str, what: str, extractors: dict,
               default=None) -> tuple[dict, dict]:
    """The document written by ``write_parts`` (its ``format`` must be ``fmt``) and its models
    loaded by role, each given ``extractors.get(role, default)`` (None: rebuilt by name). Files of
    version 1 kept the roles at the top level."""
    from . import GTunerModel, XGBoostModel

    classes = {c.__name__: c for c in (GTunerModel, XGBoostModel)}
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a tensortune {what} model ({err})") from err
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise ValueError(f"{path}: not a tensortune {what} model")
    parts = doc.get("parts") or {k: v for k, v in doc.items()
                                 if isinstance(v, dict) and "class" in v and "file" in v}
    if not parts:
        raise ValueError(f"{path}: a tensortune {what} model file that names no models")
    models = {}
    for role, entry in parts.items():
        if entry["class"] not in classes:
            raise ValueError(f"{path}: unknown {role} model class {entry['class']!r}")
        models[role] = classes[entry["class"]].load(path.with_name(entry["file"]),
                                                    extractors.get(role, default))
    return doc, models
