"""The feature-extractor contract, a per-instance cache, and concatenation of extractors."""
from __future__ import annotations

import abc

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from ..measure.pool import JobFailure
from ..measure.types import MeasureInput


class FeatureExtractor(abc.ABC):
    """Turns candidates into a float32 matrix of shape ``(len(inputs), dim)``.

    ``dim`` is fixed for a given task and space, so rows of one task can be stacked. Every
    extractor declares what its owners ask of it, with the value a plain one has.
    """

    #: the registry name (``EXTRACTORS``), also the stored rows' file name
    name: str = ""
    #: the extractor this one derives its rows from (``ilp``, ``roofline``: ``hardware``)
    source: str | None = None
    #: bumped when the rows change meaning: stored rows of another version are not read
    version: int = 1

    @abc.abstractmethod
    def extract(self, inputs: Sequence[MeasureInput]) -> np.ndarray:
        """One row per input."""

    def empty_dim(self) -> int:
        """The row width reported for an empty batch: 0 where it depends on the task."""
        return 0

    def computing(self) -> "FeatureExtractor":
        """The extractor that computes the rows (a stored wrapper's inner one)."""
        return self

    def close(self) -> None:
        """Stop the worker processes, if any (they restart when needed)."""


SCHEDULES_KEPT = 256  # a few tasks' candidates, from the search's scoring to their ranking


class CachedExtractor(FeatureExtractor):
    """Base of extractors that compute one row per input and memoize it per (task key, config).

    The caches belong to the instance and are bounded (least recently used rows are dropped),
    so a long tuning session does not grow without limit.
    """

    def __init__(self, cache_size: int = 50_000, workers: int = 0, timeout_s: float = 30.0):
        self.cache_size = cache_size
        # workers > 0: rows are computed in that many processes, each within timeout_s (for
        # extractors that compile, since a compile cannot be interrupted in-process)
        if workers > 0 and type(self).failed_row is CachedExtractor.failed_row:
            raise ValueError(f"{self.name} features are computed in-process only (workers=0)")
        self.workers, self.timeout_s = workers, timeout_s
        self._isolated = None  # started on the first row not cached
        self._rows: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self._spaces: OrderedDict[str, object] = OrderedDict()
        # recent schedules, shared with the extractors this one is concatenated with: each
        # would otherwise apply the template again (15 ms a candidate on a convolution)
        self._schedules: OrderedDict[tuple, object] | None = None

    def extract(self, inputs: Sequence[MeasureInput]) -> np.ndarray:
        fresh: dict[tuple, np.ndarray] = {}
        todo = {}
        for inp in inputs:
            key = (inp.task.key, inp.config)
            if key in self._rows:
                self._rows.move_to_end(key)
                fresh[key] = self._rows[key]
            else:
                todo.setdefault(key, inp)
        if todo:
            for key, row in zip(todo, self._compute_many(list(todo.values()))):
                row = np.asarray(row, dtype=np.float32)
                row.setflags(write=False)
                fresh[key] = self._rows[key] = row
            while len(self._rows) > self.cache_size:
                self._rows.popitem(last=False)
        rows = [fresh[(inp.task.key, inp.config)] for inp in inputs]
        if not rows:
            return np.zeros((0, self.empty_dim()), dtype=np.float32)
        dims = {r.shape[0] for r in rows}
        if len(dims) > 1:
            raise ValueError(f"{self.name} features of mixed dimensions {sorted(dims)}: "
                             "extract inputs of one task (or space) at a time")
        return np.stack(rows).astype(np.float32, copy=False)

    def empty_dim(self) -> int:
        """The row width reported for an empty batch: ``dim`` when fixed, else 0 (task-dependent)."""
        return self.dim

    #: the row width, where it does not depend on the task (a subclass's property)
    dim: int = 0

    def _compute_many(self, inputs: Sequence[MeasureInput]) -> list[np.ndarray]:
        """Rows of inputs not cached yet, in worker processes when ``workers`` > 0."""
        if self.workers <= 0:
            return [self._compute(inp) for inp in inputs]
        return [self.failed_row() if isinstance(r, JobFailure) else r
                for r in self._workers().compute(inputs)]

    def _workers(self):
        if self._isolated is None:
            from .isolate import IsolatedRows

            self._isolated = IsolatedRows(type(self), self._worker_kwargs(), self.workers,
                                          self.timeout_s)
        return self._isolated

    def warm(self) -> None:
        """Start the worker processes, if any, in the background now."""
        if self.workers > 0:
            self._workers().start_soon()

    def failed_row(self) -> np.ndarray:
        """The row of a candidate whose computation overran ``timeout_s`` or crashed its
        worker; extractors that may run in workers (those that compile) define it."""
        raise NotImplementedError(f"{self.name} features are computed in-process only")

    def _worker_kwargs(self) -> dict:
        """Constructor arguments of the in-process twin a worker computes rows with."""
        return {"workers": 0}

    def close(self) -> None:
        """Stop the worker processes, if any (they restart if more rows are needed)."""
        if self._isolated is not None:
            self._isolated.close()
            self._isolated = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_isolated"] = None  # worker processes stay with their owner
        state["_schedules"] = None  # TVM objects, and shared only in-process
        return state

    @abc.abstractmethod
    def _compute(self, inp: MeasureInput) -> np.ndarray:
        """The feature row of one input (called once per task and config)."""

    def scheduled(self, inp: MeasureInput):
        """The ``tvm.s_tir.Schedule`` of ``inp``, or None for a config its template refuses."""
        from ..space import InvalidConfigError, apply_config

        memo, key = self._schedules, (inp.task.key, inp.config)
        if memo is not None and key in memo:
            memo.move_to_end(key)
            return memo[key]
        try:
            sch = apply_config(inp.task, inp.config, self.space_of(inp.task))
        except InvalidConfigError:
            sch = None
        if memo is not None:  # read-only from here: features only look at ``sch.mod``
            memo[key] = sch
            while len(memo) > SCHEDULES_KEPT:
                memo.popitem(last=False)
        return sch

    def space_of(self, task):
        """The task's ``ConfigSpace``, defined once per task key (defining one runs the template)."""
        from ..space import task_space

        key = task.key
        space = self._spaces.get(key)
        if space is None:
            space = task_space(task)
            self._spaces[key] = space
            if len(self._spaces) > 64:
                self._spaces.popitem(last=False)
        return space


class ConcatFeatures(FeatureExtractor):
    """Several extractors side by side, e.g. ``knob+itervar``."""

    def __init__(self, parts: Sequence[FeatureExtractor]):
        if not parts:
            raise ValueError("ConcatFeatures needs at least one extractor")
        self.parts = tuple(parts)
        self.name = "+".join(p.name for p in self.parts)
        shared = OrderedDict()
        for p in self.parts:
            if isinstance(p, CachedExtractor):
                p._schedules = shared

    def extract(self, inputs: Sequence[MeasureInput]) -> np.ndarray:
        return np.concatenate([p.extract(inputs) for p in self.parts], axis=1).astype(np.float32)

    def close(self) -> None:
        for p in self.parts:
            p.close()
