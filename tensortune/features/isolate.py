"""Feature rows computed in worker processes under a time limit.

Costly extractors compile each candidate in-process, and a compile cannot be interrupted: one
huge unrolled kernel can hold a tuning loop or a dataset fill for minutes. ``IsolatedRows`` runs
an extractor's ``_compute`` in the measure package's ``WorkerPool`` instead, so a row that
overruns ``timeout_s`` (or crashes its worker) comes back as a failure the extractor turns into
a flagged row, and the work goes on. Workers start on first use.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from ..measure.pool import JobFailure, WorkerPool
from ..measure.types import MeasureInput
from ..toolchain import PRELOAD, job_task, load_heavy_modules, task_job


@functools.lru_cache(maxsize=8)
def _local_extractor(cls, kwargs: tuple):
    # One in-process instance per worker and extractor setup, so its space cache serves every
    # job of the same task (defining a space runs the template).
    return cls(**dict(kwargs))


def _row_job(job) -> np.ndarray:
    """Worker side: the row of one candidate, computed by an in-process extractor."""
    from ..space import Config

    cls, kwargs, t, config = job
    task = job_task(t)
    return _local_extractor(cls, kwargs)._compute(MeasureInput(task, Config.from_json(config)))


class IsolatedRows:
    """Computes ``cls(**kwargs)._compute`` rows in ``workers`` processes, ``timeout_s`` each.

    ``kwargs`` must make ``cls`` compute in-process (e.g. ``workers=0``).
    """

    def __init__(self, cls, kwargs: dict, workers: int, timeout_s: float):
        self.cls, self.kwargs = cls, tuple(sorted(kwargs.items()))
        self.timeout_s = timeout_s
        self._pool = WorkerPool(workers, initializer=load_heavy_modules, preload=PRELOAD)

    def compute(self, inputs: Sequence[MeasureInput]) -> list[np.ndarray | JobFailure]:
        """One row or ``JobFailure`` (timeout, crash, error) per input, in order."""
        jobs = [(self.cls, self.kwargs, task_job(i.task, tir=True), i.config.to_json())
                for i in inputs]
        return self._pool.map(_row_job, jobs, self.timeout_s)

    def start_soon(self) -> None:
        """Start the workers in the background (importing TVM there takes seconds)."""
        self._pool.start_soon()

    def close(self) -> None:
        self._pool.close()


__all__ = ["IsolatedRows"]
