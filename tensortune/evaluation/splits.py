"""How a dataset is split for a cost-model evaluation: task folds, a history dataset to pretrain
on, and random record splits (see ``harness``)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..dataset import Dataset, shape_key


@dataclass(frozen=True)
class Fold:
    """Task indices into a dataset: trained on ``train``, scored on ``test``."""

    train: tuple[int, ...]
    test: tuple[int, ...]


def task_folds(dataset: Dataset, holdout: Sequence[str] = (), folds: int = 4,
               seed: int = 0) -> list[Fold]:
    """By-task folds: one fold holding out ``holdout`` (task names or sources), or every task
    held out once across ``folds`` random groups of tasks. Twins (tasks of one ``shape_key``:
    the same operator and shapes fused differently) are never split between train and test."""
    n = len(dataset)
    if n < 2:
        raise ValueError(f"a by-task split needs at least 2 tasks, the dataset has {n}")
    keys = [shape_key(t.task.workload) for t in dataset]
    if holdout:
        fold = _holdout_fold(keys, tuple(dataset.match(holdout)))
        if not fold.train:
            raise ValueError("the holdout (and its twins) covers every task of the dataset: "
                             "nothing to train on")
        return [fold]
    if folds < 2:
        raise ValueError(f"folds must be at least 2, got {folds}")
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    members = list(groups.values())
    if len(members) < 2:
        raise ValueError("every task of the dataset is a twin of every other: no by-task split")
    bins: list[list[int]] = [[] for _ in range(min(folds, len(members)))]
    for g in np.random.default_rng(seed).permutation(len(members)):
        min(bins, key=len).extend(members[g])  # the smallest fold takes the next group
    return [Fold(tuple(i for i in range(n) if i not in b), tuple(sorted(b))) for b in bins]


def model_folds(dataset: Dataset) -> list[Fold]:
    """Leave one model out: a fold per source model (``TaskInfo.source``) holding out all its
    tasks at once, so no sibling layer of the held-out network is trained on; tasks of other
    models that are twins of a held-out task (one ``shape_key``) are left out of training too."""
    sources = sorted({t.info.source for t in dataset})
    if len(sources) < 2:
        raise ValueError(f"a by-model split needs tasks of at least 2 models, the dataset has "
                         f"only {', '.join(sources) or 'none'}")
    keys = [shape_key(t.task.workload) for t in dataset]
    folds = []
    for source in sources:
        fold = _holdout_fold(keys, tuple(i for i, t in enumerate(dataset)
                                         if t.info.source == source))
        if not fold.train:
            raise ValueError(f"every task of the dataset is {source}'s or a twin of one: "
                             f"nothing to train on when it is held out")
        folds.append(fold)
    return folds


def _holdout_fold(keys: Sequence[tuple], test: tuple[int, ...]) -> Fold:
    """Score ``test``; train on every other task that is no twin (same shape key) of one."""
    held, tested = {keys[i] for i in test}, set(test)
    return Fold(tuple(i for i, key in enumerate(keys) if i not in tested and key not in held), test)


def history_fold(history: Dataset, tests: Dataset, twins: bool = False) -> tuple[Dataset, Fold]:
    """One dataset of ``history``'s tasks then ``tests``'s, and the fold that trains on the
    former (less the twins of any test task, unless ``twins``) and scores the latter."""
    held = {shape_key(t.task.workload) for t in tests}
    train = tuple(i for i, t in enumerate(history)
                  if twins or shape_key(t.task.workload) not in held)
    if not train:
        raise ValueError("every task of the history is a twin of a scored task: nothing to "
                         "pretrain on (keep them with history_twins / --history-twins)")
    merged = Dataset(history.tasks + tests.tasks, tests.path)
    return merged, Fold(train, tuple(range(len(history), len(merged))))


def record_split(n: int, n_first: int, seed: int) -> tuple[list[int], list[int]]:
    """A random split of ``n`` records into ``n_first`` and the rest (both in record order)."""
    order = np.random.default_rng(seed).permutation(n)
    return sorted(int(i) for i in order[:n_first]), sorted(int(i) for i in order[n_first:])


__all__ = ["Fold", "task_folds", "model_folds", "history_fold", "record_split"]
