"""One service job as scheduler stages: import, look up, tune toward the SLA, build, time, pack.

The job is a generator of ``Stage`` requests (``tuner.stages``) like any tuning job, so the
scheduler interleaves it with other users' jobs. Its course (seed 002, section 4.3):

1. import the model and extract its tasks;
2. if every task has a best known config (``RecordsIndex``: exact target, then family) and the
   job has an SLA: build with those, time the model, and stop if it meets the SLA: no trial;
3. tune (tasks start warm from the shared records) until the budget is spent or the predicted
   latency meets the SLA; the prediction is each task's best kernel time times its weight, plus
   what lies between the kernels (the last timed model minus its kernels' sum). A met
   prediction is checked by building and timing; a miss corrects the estimate and tuning goes on;
4. build with the best known configs, time the model, save the module, its MetaSchedule
   database and ``run.json`` as ``artifact.tar.gz``.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path

from ..frontend.model import random_inputs
from ..measure.model_timing import ModelTimer, save_inputs
from ..session import task_label
from ..settings import Settings
from ..tasks.claims import SHARED, Claimant
from ..tuner.stages import (BUILD_MODEL, EXTRACT, IMPORT, MEASURE, PACK, PREDICT, SYNC_RECORDS,
                             TIME_MODEL, WAIT, Stage)
from .index import RecordsIndex
from .store import Store

ARTIFACT = "artifact.tar.gz"
MODEL_FILE = "model.onnx"
TIMING = "timing"  # the module saved with its inputs for the device that times it


@dataclass(frozen=True)
class JobPlan:
    """What a job was asked: its files' directory, SLA, remaining trials and target."""

    id: str
    dir: Path
    input_shapes: dict
    sla_ms: float | None
    trials: int
    target: dict
    hardware_free: bool
    timeable: bool = True  # a device of the service can run the target
    repeat: int = 30


class Progress:
    """What a running job has reached, kept in the store: each task's best and trials, the
    errors by kind, the tuning curve (trials, predicted ms)."""

    def __init__(self, store: Store, plan: JobPlan, tasks, known: dict, trials_done: int):
        """``tasks``: the model's tunable tasks (``tasks.extract``), ``known``: their best
        known configs (``RecordsIndex.best_configs``)."""
        self.store, self.plan = store, plan
        self.tasks = {t.key: t for t in tasks}
        self.best = {k: b.cost for k, b in known.items()}  # seconds per call, by task key
        self.match = {k: b.match for k, b in known.items()}
        self.trials = {k: 0 for k in self.tasks}
        self.errors: dict[str, int] = {}
        self.between_s = 0.0  # model time outside the tuned kernels, from the last timing
        self.trials_done = trials_done
        self._lock = threading.Lock()

    def on_result(self, inp, res) -> None:
        key = inp.task.key
        with self._lock:
            self.trials[key] = self.trials.get(key, 0) + 1
            kind = res.error.value
            if kind != "none":
                self.errors[kind] = self.errors.get(kind, 0) + 1
            elif res.costs and res.cost < self.best.get(key, math.inf):
                self.best[key], self.match[key] = res.cost, "tuned"

    def took(self, shared: dict, known: dict) -> None:
        """The tasks another job tuned for this one (``{task key: job id}``) and their
        bests (``RecordsIndex.best_configs``)."""
        for key, holder in shared.items():
            if key in known:
                self.best[key], self.match[key] = known[key].cost, f"job {holder}"
        if shared:
            self.save()

    def kernels_s(self) -> float | None:
        if any(k not in self.best for k in self.tasks):
            return None
        return sum(t.weight * self.best[k] for k, t in self.tasks.items())

    def predicted_ms(self) -> float | None:
        kernels = self.kernels_s()
        return None if kernels is None else (kernels + self.between_s) * 1e3

    def timed(self, latency_ms: float) -> None:
        kernels = self.kernels_s()
        if kernels is not None:
            self.between_s = max(0.0, latency_ms / 1e3 - kernels)
        self.store.add_event(self.plan.id, "timed", {"trials": self.trials_done,
                                                     "latency_ms": latency_ms})
        self.save(latency_ms=latency_ms)

    def on_step(self, charged: int) -> bool:
        """After each batch: the curve grows; True when the predicted latency meets the SLA."""
        self.trials_done += charged
        predicted = self.predicted_ms()
        self.store.add_event(self.plan.id, "curve", {"trials": self.trials_done,
                                                     "predicted_ms": predicted})
        self.save()
        sla = self.plan.sla_ms
        return sla is not None and predicted is not None and predicted <= sla

    def save(self, **fields) -> None:
        tasks = [{"name": task_label(t), "key": k[:12], "weight": t.weight,
                  "trials": self.trials.get(k, 0),
                  "best_us": round(self.best[k] * 1e6, 3) if k in self.best else None,
                  "source": self.match.get(k)} for k, t in self.tasks.items()]
        self.store.update_job(self.plan.id, tasks=tasks, errors=dict(self.errors),
                              predicted_ms=self.predicted_ms(), **fields)


def job_stages(plan: JobPlan, settings: Settings, index: RecordsIndex, store: Store,
               trials_done: int = 0, claims: Claimant | None = None):
    """The job's stages; its outcome is written to ``store`` as it goes. With ``claims`` a task
    another running job tunes is not tuned again: the job waits for it before building."""
    from ..session import Session

    settings = dataclasses.replace(settings, target=plan.target)
    session = yield Stage(IMPORT, lambda _: Session.from_onnx(
        plan.dir / MODEL_FILE, plan.input_shapes, settings=settings), task="import")
    tasks = yield Stage(EXTRACT, lambda _: [t for t in session.extract() if t.tunable],
                        task="extract")
    if plan.hardware_free:
        return (yield from _hardware_free(plan, session, store))
    yield Stage(SYNC_RECORDS, lambda _: index.sync(), task="records")
    known = index.best_configs([t.task for t in tasks])
    progress = Progress(store, plan, tasks, known, trials_done)
    progress.save()
    sla = plan.sla_ms
    if sla is not None and tasks and len(known) == len(tasks):
        latency = yield from _build_and_time(plan, session, {k: b.config for k, b in
                                                             known.items()})
        progress.timed(latency)
        if latency <= sla:
            store.update_job(plan.id, note="the best known configs meet the SLA: no trial")
            return (yield from _finish(plan, session, store, latency, tuned=False))
    remaining, well_tuned, last = plan.trials, None, ({}, None)
    while remaining > 0 and tasks:
        result = yield from session.tune_stages(
            remaining, well_tuned=well_tuned, on_result=progress.on_result,
            on_step=lambda prog, charged: progress.on_step(charged), claims=claims)
        remaining -= result.trials
        shared = yield from _wait_for_shared(plan, store, tasks, result, claims)
        well_tuned = 1 << 30  # a second round tunes every task, however tuned before
        yield Stage(SYNC_RECORDS, lambda _: index.sync(), task="records")
        progress.took(shared, index.best_configs([t.task for t in tasks if t.key in shared]))
        if sla is None or result.trials == 0:
            break
        predicted = progress.predicted_ms()
        if predicted is None or predicted > sla:
            break  # the budget ran out before the prediction met the SLA
        best = _configs(index, tasks, progress)
        latency = yield from _build_and_time(plan, session, best)
        progress.timed(latency)
        last = (best, latency)
        if latency <= sla:
            break
    best = _configs(index, tasks, progress)
    latency = last[1]
    if best != last[0] or latency is None:  # else the module built last is the one to ship
        latency = yield from _build_and_time(plan, session, best)
        progress.timed(latency)
    return (yield from _finish(plan, session, store, latency, tuned=True))


def _wait_for_shared(plan: JobPlan, store: Store, tasks, result, claims: Claimant | None):
    """The tasks another job tuned instead of this one: said in the events, then waited for
    (their results are in the shared records once that job lets go of them)."""
    shared = {name: why.removeprefix(SHARED) for name, why in result.skipped.items()
              if why.startswith(SHARED)}
    if not shared or claims is None:
        return {}
    for name, holder in shared.items():
        store.add_event(plan.id, "shared", {"task": name, "tuned_by": holder})
    took = {t.key: shared[task_label(t)] for t in tasks if task_label(t) in shared}
    yield Stage(WAIT, lambda _: claims.wait(list(took)), task=f"{len(took)} shared task(s)")
    return took


def _configs(index: RecordsIndex, tasks, progress: Progress) -> dict:
    """What the model is built with: each task's best known config; a task never measured
    (a small budget) is built with its template's first seed (``tasks.build_model``)."""
    best = {k: b.config for k, b in index.best_configs([t.task for t in tasks]).items()}
    for t in tasks:
        if t.key not in best:
            progress.match.setdefault(t.key, "template seed")
    return best


def _hardware_free(plan: JobPlan, session, store: Store):
    summary = yield Stage(PREDICT, lambda _: session.tune_hardware_free(), task="hardware-free")
    store.update_job(plan.id, predicted_ms=summary["predicted_ms"],
                     note=f"hardware-free: {summary['compiled']} candidates compiled, none run")
    yield Stage(BUILD_MODEL, lambda _: session.build(), task="build model")
    latency = None
    if plan.timeable:  # a hardware-free job may be for a device the service has not
        yield Stage(BUILD_MODEL, lambda _: _for_timing(session, plan), task="save model")
        latency = yield Stage(MEASURE, lambda runner: _time(runner, plan), task=TIME_MODEL)
    return (yield from _finish(plan, session, store, latency, tuned=True))


def _build_and_time(plan: JobPlan, session, best: dict):
    yield Stage(BUILD_MODEL, lambda _: _for_timing(session, plan, best), task="build model")
    return (yield Stage(MEASURE, lambda runner: _time(runner, plan), task=TIME_MODEL))


def _for_timing(session, plan: JobPlan, best: dict | None = None) -> None:
    """Build (with ``best``; None: the module built already) and save the module with its
    inputs where the device's runner reads them (``measure.model_timing``)."""
    if best is None:
        compiled = session.require_compiled("time the model")
    else:
        compiled = session.build(best=best)
    compiled.save(plan.dir / TIMING)
    save_inputs(plan.dir / TIMING, random_inputs(compiled.inputs, seed=0))


def _time(runner: ModelTimer, plan: JobPlan) -> float:
    """The model's median latency in ms, timed by the device the scheduler gave the stage
    (not in this process: a remote device times it where it is)."""
    costs = runner.time_model(str(plan.dir / TIMING), plan.repeat, min_repeat_ms=100)
    return statistics.median(costs) * 1e3


def _finish(plan: JobPlan, session, store: Store, latency_ms: float | None, tuned: bool):
    yield Stage(PACK, lambda _: pack(session, plan.dir / ARTIFACT), task="artifact")
    sla = plan.sla_ms
    met = None if sla is None or latency_ms is None else latency_ms <= sla
    fields = {}
    if met is False:
        fields["note"] = (f"the SLA of {sla:g} ms is not met: the best latency reached is "
                          f"{latency_ms:.4g} ms")
    store.update_job(plan.id, latency_ms=latency_ms, sla_met=met, artifact=True, **fields)
    return {"latency_ms": latency_ms, "sla_met": met, "tuned": tuned}


def pack(session, path: Path) -> Path:
    """Save the built module and write it, its MetaSchedule database and ``run.json`` to
    ``path`` (a tar.gz), atomically."""
    session.save()
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for name in ("module", "metaschedule", "run.json"):
            if (session.run_dir / name).exists():
                tar.add(session.run_dir / name, arcname=name)
    tmp.replace(path)
    return path
