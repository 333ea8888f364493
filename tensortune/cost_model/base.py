"""The cost-model contract (``CostModel``, ``ModelSpec``) and the training labels every model
shares."""
from __future__ import annotations

import abc
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..features import FeatureExtractor
from ..measure.types import MeasureInput, MeasureResult
from . import extractors


class CostModel(abc.ABC):
    """Learns from measurements and scores unmeasured candidates (higher = predicted faster).

    Everything the tuning loop, the search and hardware-free tuning ask of a model is declared
    here with the value a plain model has, so no caller has to find out at run time what a
    model can do (MetaSchedule's ``CostModel`` is the pattern). A subclass overrides what
    differs: ``Prescreened`` declares a ``prescreen``, a pretrained model is ``trained`` before
    it saw the task, a model on compiling features ``compiles``.
    """

    #: the features ``predict`` reads; None for a model that reads none of its own
    extractor: FeatureExtractor | None = None
    #: a cheap model the search walks on; this one then picks from what it rates best
    prescreen: CostModel | None = None
    #: with a ``prescreen``: how many of its favourites per wanted config this model ranks
    shortlist: int = 1
    #: the TFLOP/s a score of 1.0 stands for; None when scores only rank
    label_scale: float | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "load" in vars(cls):  # it has a file format: it may be a part of another's file
            _LOADABLE[cls.__name__] = cls

    @property
    def trained(self) -> bool:
        """Whether ``predict`` has an opinion before this task's measurements (pretrained, or
        fitted already): the loop lets such a model pick the first batch and order the seeds."""
        return False

    @property
    def compiles(self) -> bool:
        """Whether ``predict`` compiles every candidate it scores (features such as
        ``hardware``), so that scoring thousands of them is out of reach."""
        return extractors.compiles(self.extractor)

    @property
    def costly(self) -> CostModel:
        """The model whose scores ``predict`` returns: this one, unless it wraps another."""
        return self

    @abc.abstractmethod
    def fit(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Learn from this task's measurements (all of them so far)."""

    @abc.abstractmethod
    def predict(self, inputs: Sequence[MeasureInput]) -> np.ndarray:
        """One score per input, higher = predicted faster."""

    def pretrain(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Learn from history (other tasks, earlier runs); by default as from ``fit``."""
        self.fit(inputs, results)

    def save(self, path: str | Path) -> None:
        """Write the model to ``path`` (read back by ``load``)."""
        raise NotImplementedError(f"{type(self).__name__} cannot be saved")

    @classmethod
    def load(cls, path: str | Path, extractor=None) -> CostModel:
        """Read a model written by ``save``; the extractor is rebuilt by name unless given."""
        raise NotImplementedError(f"{cls.__name__} cannot be loaded")

    def close(self) -> None:
        """Stop the worker processes of the model's features (they restart if needed)."""
        extractors.close(self.extractor)


_LOADABLE: dict[str, type[CostModel]] = {}  # class name -> class, for files made of models


class Adapted(CostModel):
    """A model of any other class (one written before ``CostModel``, or a test's stand-in):
    an object with ``fit`` and ``predict`` and, optionally, the declarations of
    ``CostModel`` (``trained``, ``label_scale``, ``compiles``, ``extractor``).

    The one place where an object is asked what it has: such an object declared nothing
    to anyone, and the rest of the package only ever sees this ``CostModel``."""

    def __init__(self, inner):
        self.inner = inner

    def _declared(self, name: str, default):
        return getattr(self.inner, name, default)

    @property
    def extractor(self):
        return self._declared("extractor", None)

    @property
    def label_scale(self):
        return self._declared("label_scale", None)

    @property
    def trained(self) -> bool:
        return bool(self._declared("trained", False))

    @property
    def compiles(self) -> bool:
        return bool(self._declared("compiles", False))

    def fit(self, inputs, results) -> None:
        self.inner.fit(inputs, results)

    def pretrain(self, inputs, results) -> None:
        self.inner.pretrain(inputs, results)

    def predict(self, inputs) -> np.ndarray:
        return self.inner.predict(inputs)

    def save(self, path) -> None:
        self.inner.save(path)


def as_cost_model(model) -> CostModel | None:
    """``model`` as a ``CostModel``: itself when it is one (or None), else ``Adapted``."""
    return model if model is None or isinstance(model, CostModel) else Adapted(model)


@dataclass(frozen=True)
class ModelSpec:
    """A cost model by name, in the registry ``cost_model.MODELS``.

    ``make(extractor, seed=0, **options)`` builds one on ``extractor`` (``features`` names the
    features to give it when nothing else says). A ``fresh`` model learns each task from
    scratch: it is a tuner name (``tune-op --tuner``) and one of the evaluation harness's
    models, as ``<name>-<objective>`` for each of its ``objectives``."""

    name: str
    summary: str  # one line, for help texts
    make: Callable[..., CostModel]
    fresh: bool = True
    objectives: tuple[str, ...] = ()
    features: str = "knob"

    @property
    def harness_names(self) -> tuple[str, ...]:
        """Its names in the evaluation harness (``xgb-rank``, ``xgb-reg``; ``gtuner``)."""
        return tuple(f"{self.name}-{o}" for o in self.objectives) or (self.name,)


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
    version 1 kept the roles at the top level. A part may be of any ``CostModel`` class with a
    ``load`` of its own (they register themselves when defined)."""
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
        if entry["class"] not in _LOADABLE:
            raise ValueError(f"{path}: unknown {role} model class {entry['class']!r}")
        models[role] = _LOADABLE[entry["class"]].load(path.with_name(entry["file"]),
                                                    extractors.get(role, default))
    return doc, models
