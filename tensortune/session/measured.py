"""The measured tuning stage: a model's tunable tasks under the task scheduler, then its heavy
tasks' best configs confirmed (``tasks.confirm``), as stage requests (``tuner.stages``), every
measurement appended to the run's log and the shared records."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from ..records import RecordWriter, load_records
from ..settings import Settings
from ..space import task_seeds, task_space
from ..tasks.confirm import candidates, confirm_stages
from ..tasks.scheduler import TaskScheduler, history_by_task
from ..tuner import make_loop
from .runs import task_label


def tune_measured(tasks: list, settings: Settings, run_log: Path, records_path: Path,
                  trials: int, scheduler: str = "gradient", tuner: str = "xgb",
                  features: str = "knob", well_tuned: int | None = None,
                  on_step: Callable | None = None, on_result: Callable | None = None,
                  cost_model: str = "fresh", claims=None):
    """Spend ``trials`` across ``tasks`` (tunable, non-empty; ``Session.tune`` says how), warm
    from ``records_path``; a generator of stages that returns the ``ScheduleResult``.
    ``claims``: a job's ``tasks.claims.Claimant`` (tasks other jobs tune are left to them)."""
    history = {}
    if records_path.exists():
        history = history_by_task(load_records(records_path), [t.task for t in tasks])
    if well_tuned is None:
        well_tuned = max(settings.search.batch_size, trials // len(tasks))
    run_log.parent.mkdir(parents=True, exist_ok=True)
    # the run's log has errors.log beside it; the shared records are a copy of the same
    log = RecordWriter(run_log)
    shared = RecordWriter(records_path, copy=True)
    callbacks = [log.append, shared.append] + ([on_result] if on_result else [])
    try:
        sched = TaskScheduler(
            [(task_label(t), t.task, t.weight) for t in tasks], None, None, settings,
            lambda task: _loop(task, settings, tuner, features, cost_model),
            history=history, callbacks=callbacks, strategy=scheduler, well_tuned=well_tuned,
            seed=settings.seed, claims=claims)
        schedule = yield from sched.stages(trials, on_step)
        # the records as written (this run's and earlier ones), for each task's best few
        # (those of this run's tasks that it tuned: a skipped one was confirmed before)
        tuned = [(task_label(t), t.task, t.weight) for t in tasks
                 if task_label(t) not in schedule.skipped]
        chosen = candidates(tuned, load_records(records_path), settings.search)
        confirmed = yield from confirm_stages(
            chosen, settings.search.confirm_rounds,
            lambda inp, res: (log.append(inp, res, confirm=True),
                              shared.append(inp, res, confirm=True)))
        return dataclasses.replace(schedule, confirmed=confirmed)
    finally:
        log.close()
        shared.close()


def _loop(task, settings: Settings, tuner: str, features: str, cost_model: str = "fresh"):
    space = task_space(task)
    seeds = task_seeds(task, space) if settings.search.seeds else ()
    return make_loop(tuner, space, settings, features, seeds=seeds, cost_model=cost_model)
