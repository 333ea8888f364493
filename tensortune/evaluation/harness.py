"""How good is a cost model on a dataset: splits, fitting, per-task metrics, comparisons.

Three ways to split a ``Dataset``:

- ``by-task`` (transfer): whole tasks are held out; the model is pretrained on the other
  tasks and never sees a held-out task except, with ``finetune=k``, ``k`` random records of it
  (then it is scored on the rest). Held-out tasks are named (``holdout``) or, by default, every
  task is held out once in ``folds`` task-level folds.
  With a ``history`` dataset (e.g. records of another machine) the model is instead pretrained
  on the history's tasks, less the twins of the scored tasks unless ``history_twins``, and
  every task of ``dataset`` (or of ``holdout``) is scored.
- ``by-model``: leave one model out: every task of one source model (``TaskInfo.source``) is
  held out at once, in one fold per model (``model_folds``), so the model never trained on a
  sibling layer of the network it scores, nor on another model's twin of one of its tasks;
  ``finetune`` works as in ``by-task``.
- ``within-task``: one model per task (of ``holdout``, if given), trained on a random
  ``train_fraction`` of its records and scored on the rest (no transfer).

Knob features are the config itself, so their width and meaning depend on the task's space: a
model on them only transfers between tasks whose knob rows have the same width (e.g. two
convolutions). In ``by-task`` a held-out task with no such training task is skipped with that
reason (or, with ``finetune``, trained on its fine-tuning records alone and marked "no transfer").

Each scored task gets the metrics of ``scores`` (Pearson, Spearman, pairwise accuracy,
top-k ratios). A task with fewer than ``MIN_SCORED`` successful test records (e.g. a small task
after ``finetune``) is skipped with that reason, not scored.
"""
from __future__ import annotations

import copy
import time
import types
from collections.abc import Callable, Sequence

import numpy as np

from ..cost_model import MODELS as COST_MODELS
from ..dataset import Dataset, TaskData
from ..features import ConcatFeatures, FeatureExtractor
from .scores import METRICS, TOPK, EvalReport, TaskScore, score_task
from .splits import Fold, history_fold, model_folds, record_split, task_folds

# the registry's fresh models (``cost_model.MODELS``), one per objective: xgb-rank, xgb-reg, ...
_BY_NAME = {name: (spec, objective)
            for spec in COST_MODELS.values() if spec.fresh
            for name, objective in zip(spec.harness_names, spec.objectives or (None,))}
MODELS = tuple(_BY_NAME)
SPLITS = ("by-task", "by-model", "within-task")
MIN_SCORED = 5  # fewer successful test records than this make no meaningful correlation

ModelFactory = Callable[[FeatureExtractor], object]


def make_model(name: str, extractor: FeatureExtractor, seed: int = 0, label: str | None = None):
    """A fresh cost model by name (``MODELS``: ``xgb-rank``, ``xgb-reg``, ``gtuner``,
    ``ensemble`` of the two, ...), trained on ``label`` (``relative`` or ``absolute``
    throughput; None: the model's default)."""
    if name not in _BY_NAME:
        raise ValueError(f"unknown cost model {name!r}; choose one of {', '.join(MODELS)}")
    spec, objective = _BY_NAME[name]
    options = {"seed": seed} if label is None else {"seed": seed, "label": label}
    if objective is not None:
        options["objective"] = objective
    return spec.make(extractor, **options)


def available_features() -> tuple[str, ...]:
    """The extractor names ``make_extractor`` knows in this installation."""
    from ..features import EXTRACTORS

    return tuple(EXTRACTORS)


def default_feature_sets() -> tuple[str, ...]:
    """The feature combinations ``compare`` tries: knob, itervar, curve, knob+itervar,
    itervar+cache, and the hardware ones (with and without roofline and cache) when the hardware
    extractor is available."""
    sets = ["knob", "itervar", "curve", "knob+itervar", "itervar+cache"]
    if "hardware" in available_features():
        sets += ["hardware", "knob+itervar+hardware", "itervar+hardware+roofline",
                 "itervar+hardware+roofline+cache"]
    return tuple(sets)


class FeatureBank:
    """One extractor instance per feature name for a whole run, so each (task, config) row of
    each extractor is computed once however many model x feature combinations use it."""

    def __init__(self, store=None):
        self.store = store  # a FeatureStore: costly extractors read and keep their rows there
        self._parts: dict[str, FeatureExtractor] = {}
        self._widths: dict[tuple[str, str], int] = {}

    def get(self, features: str) -> FeatureExtractor:
        from ..features import EXTRACTORS, build_part, make_extractor
        from ..features.store import COSTLY

        names = [p.strip() for p in features.split("+") if p.strip()]
        unknown = [n for n in names if n not in EXTRACTORS]
        if unknown or not names:
            make_extractor(features)  # raises, naming them
        for name in names:
            if name not in self._parts:
                source = EXTRACTORS[name].source
                if source is not None:  # derived (roofline): from the bank's, maybe stored, source
                    self.get(source)
                part = build_part(name, self._parts)
                if self.store is not None and name in COSTLY:
                    part = self.store.wrap(part)
                self._parts[name] = part
        parts = [self._parts[n] for n in names]
        return parts[0] if len(parts) == 1 else ConcatFeatures(parts)

    def stored(self, features: str, data: TaskData) -> bool:
        """True when every costly row of ``features`` for ``data`` is in the store already
        (always True for cheap feature sets)."""
        from ..features import EXTRACTORS
        from ..features.store import COSTLY, StoredExtractor

        names = [n.strip() for n in features.split("+") if n.strip()]
        names += [EXTRACTORS[n].source for n in names if n in EXTRACTORS]
        costly = {n for n in names if n in COSTLY}  # a derived part needs its source's rows
        for name in costly:
            part = self.get(name)
            if not isinstance(part, StoredExtractor) or not all(i in part for i in data.inputs):
                return False
        return True

    def width(self, features: str, data: TaskData) -> int:
        """The row width of ``features`` on ``data``'s task."""
        key = (features, data.task.key)
        if key not in self._widths:
            self._widths[key] = int(self.get(features).extract(data.inputs[:1]).shape[1])
        return self._widths[key]


def space_specific(features: str) -> bool:
    """True when rows depend on the task's space (knob), so tasks must match to share a model."""
    return "knob" in features.split("+")


# -- evaluation ------------------------------------------------------------------------------------

def evaluate(dataset: Dataset, model: str | ModelFactory, features: str, split: str = "by-task",
             holdout: Sequence[str] = (), folds: int = 4, finetune: int = 0,
             train_fraction: float = 0.5, seed: int = 0, bank: FeatureBank | None = None,
             ks: Sequence[int] = TOPK, keep_predictions: bool = False,
             on_progress: Callable[[str], None] | None = None,
             label: str | None = None, history: Dataset | None = None,
             history_twins: bool = False) -> EvalReport:
    """Fit and score ``model`` (a name of ``MODELS`` or ``factory(extractor) -> model``) with
    ``features`` on ``dataset`` split as ``split`` (see the module docstring).

    ``history`` pretrains on another dataset's tasks instead of folds of this one (see the
    module docstring).
    ``label`` picks the training labels of a named model (see ``make_model``); the report's
    model name then says which. With ``keep_predictions`` the report's ``predictions`` maps each scored task to
    ``(scores, results)`` for plots.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    if finetune < 0:
        raise ValueError(f"finetune must be >= 0, got {finetune}")
    if history is not None and split != "by-task":
        raise ValueError("a history dataset pretrains for the by-task split only")
    if split == "by-model" and holdout:
        raise ValueError("by-model holds out every model once; to hold out named tasks or "
                         "models use the by-task split with holdout")
    if split == "within-task" and not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    if isinstance(model, str) and model not in MODELS:
        raise ValueError(f"unknown cost model {model!r}; choose one of {', '.join(MODELS)}")
    bank = bank or FeatureBank()
    extractor = bank.get(features)
    name = model if isinstance(model, str) else _factory_name(model)
    if label is not None and isinstance(model, str):
        from ..cost_model.base import LABELS

        if label not in LABELS:
            raise ValueError(f"unknown label {label!r}; choose one of {', '.join(LABELS)}")
        name = f"{model} ({label})"
    factory = ((lambda ex: make_model(model, ex, seed, label)) if isinstance(model, str)
               else model)
    run = _Run(factory, extractor, ks, keep_predictions, on_progress or (lambda _: None))
    if split == "within-task":
        tasks, by_task_folds = (dataset.select(holdout) if holdout else dataset), []
    elif history is not None:
        dataset, fold = history_fold(history, dataset.select(holdout) if holdout else dataset,
                                     history_twins)
        tasks, by_task_folds = dataset, [fold]
    elif split == "by-model":
        tasks, by_task_folds = dataset, model_folds(dataset)
    else:
        tasks, by_task_folds = dataset, task_folds(dataset, holdout, folds, seed)
    start = time.perf_counter()
    for data in tasks:  # fill the bank's caches, so fit and predict times are the models'
        extractor.extract(list(data.inputs))
    extract_s = time.perf_counter() - start
    if split == "within-task":
        for i, data in enumerate(tasks):
            train, test = record_split(data.n, int(round(data.n * train_fraction)), seed + i)
            run.fit_and_score(None, data.subset(train), data.subset(test), "")
    for fold in by_task_folds:
        _by_task_fold(run, dataset, fold, features, finetune, seed, bank)
    return EvalReport(name, features, split, finetune, tuple(run.scores), tuple(run.skipped),
                      run.fit_s, run.predict_s, extract_s, run.predictions)


def compare(dataset: Dataset, models: Sequence[str] = MODELS,
            feature_sets: Sequence[str] | None = None, **options) -> list[EvalReport]:
    """``evaluate`` for every model x feature set, sharing one ``FeatureBank``."""
    bank = options.pop("bank", None) or FeatureBank()
    return [evaluate(dataset, m, f, bank=bank, **options)
            for f in (feature_sets or default_feature_sets()) for m in models]


def _factory_name(factory: ModelFactory) -> str:
    """A factory's own name (a function's or class's), else its type's (a ``partial``)."""
    named = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)
    return factory.__name__ if isinstance(factory, named) else type(factory).__name__


class _Run:
    """Accumulates one evaluation's scores and timings."""

    def __init__(self, factory, extractor, ks, keep_predictions, progress):
        self.factory, self.extractor, self.ks = factory, extractor, ks
        self.keep_predictions, self.progress = keep_predictions, progress
        self.scores: list[TaskScore] = []
        self.skipped: list[tuple[str, str]] = []
        self.predictions: dict = {}
        self.fit_s = self.predict_s = 0.0

    def new_model(self, pretrain: Sequence[TaskData]):
        """A model pretrained on ``pretrain`` (an untrained one when it is empty)."""
        model = self.factory(self.extractor)
        if pretrain:
            start = time.perf_counter()
            model.pretrain([i for d in pretrain for i in d.inputs],
                           [r for d in pretrain for r in d.results])
            self.fit_s += time.perf_counter() - start
        return model

    def fit_and_score(self, base, train: TaskData | None, test: TaskData, note: str,
                      n_pretrain: int = 0) -> None:
        """Fine-tune a copy of ``base`` (or fit a fresh model) on ``train``, score ``test``."""
        model = base
        if train is not None and train.n:
            # the copy shares the extractor, so its cached rows serve every copy
            model = (copy.deepcopy(base, {id(self.extractor): self.extractor}) if base is not None
                     else self.factory(self.extractor))
            start = time.perf_counter()
            model.fit(list(train.inputs), list(train.results))
            self.fit_s += time.perf_counter() - start
        n_ok = sum(r.ok for r in test.results)
        if model is None or n_ok < MIN_SCORED:
            reason = "nothing to train on" if model is None else (
                f"{n_ok} successful test record(s) left to score (fewer than {MIN_SCORED})"
                + (f" after fine-tuning on {train.n}" if train is not None and train.n else ""))
            self.skipped.append((test.name, reason))
            return
        start = time.perf_counter()
        scores = np.asarray(model.predict(list(test.inputs)), dtype=float)
        self.predict_s += time.perf_counter() - start
        n_train = n_pretrain + (train.n if train is not None else 0)
        self.scores.append(score_task(test, scores, n_train, self.ks, note))
        if self.keep_predictions:
            self.predictions[test.name] = (scores, test.results)
        self.progress(test.name)


def _by_task_fold(run: _Run, dataset: Dataset, fold: Fold, features: str, finetune: int,
                  seed: int, bank: FeatureBank) -> None:
    train = [dataset.tasks[i] for i in fold.train]
    # held-out tasks that can share a pretrained model: all of them, unless rows are
    # space-specific, in which case only tasks of one width train together
    groups: dict[tuple[int, ...], list[TaskData]] = {}
    for i in fold.test:
        test = dataset.tasks[i]
        if space_specific(features):
            width = bank.width(features, test)
            peers = tuple(j for j, d in zip(fold.train, train) if bank.width(features, d) == width)
        else:
            peers = tuple(fold.train)
        groups.setdefault(peers, []).append(test)
    for peers, tests in groups.items():
        pretrain = [dataset.tasks[j] for j in peers]
        note = ""
        if not pretrain:
            note = (f"no transfer: no training task has {features} rows of this width "
                    f"({bank.width(features, tests[0])})")
            if not finetune:
                for test in tests:
                    run.skipped.append((test.name, f"{note}; knob features do not transfer "
                                        "across spaces: use --split within-task or --finetune"))
                continue
        try:
            base = run.new_model(pretrain) if pretrain else None
        except ValueError as err:  # e.g. too few successful records to pretrain on
            run.skipped.extend((t.name, f"pretraining failed: {err}") for t in tests)
            continue
        n_pretrain = sum(d.n for d in pretrain)
        for test in tests:
            if finetune:
                tune_idx, rest = record_split(test.n, min(finetune, test.n - 1), seed)
                run.fit_and_score(base, test.subset(tune_idx), test.subset(rest), note, n_pretrain)
            else:
                run.fit_and_score(base, None, test, note, n_pretrain)


__all__ = ["MODELS", "SPLITS", "TOPK", "MIN_SCORED", "METRICS", "make_model", "available_features",
           "default_feature_sets", "FeatureBank", "space_specific", "Fold", "task_folds",
           "model_folds", "history_fold", "record_split", "TaskScore", "score_task", "EvalReport",
           "evaluate", "compare"]
