"""The multi-job scheduler: many tuning jobs' stages on shared cores and devices (seed 002).

Each job is a generator of ``Stage`` requests (``tuner.stages``). Policies:

* ``load-aware``: every job is live; a stage starts as soon as its resource is free, the
  waiting stage of the job with the highest priority, then, while no device has work, a build
  (a measurement follows it at once), then the job served least so far (fair share), goes
  first. CPU stages (propose, update, a model's import, extract, build-model, pack) take one
  build core, a build takes all of
  them, a measurement takes one device exclusively (and on ``local``, the whole CPU as well).
* ``sequential``: the same resources, one job at a time (in priority, then submission order)
  and one stage at a time, a group's in turn: each job as it would run alone (``drive``).
* ``concurrent``: independent jobs sharing everything, as separate processes would: every job
  has its own builder and its own runner on all cores, nothing waits, timings interfere.

Jobs may be submitted while ``run`` is going. ``run`` returns a ``Report``: each job's result,
the makespan, each resource's busy fraction and the log of stage events.
"""
from __future__ import annotations

import itertools
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..measure.rpc_runner import DeviceUnavailable
from ..tuner.stages import BUILD, MEASURE, WAIT, Stage, StageGen, counts_as_trials
from .devices import Resources, why_none_serves

POLICIES = ("load-aware", "sequential", "concurrent")


@dataclass
class Job:
    """A named job: ``start()`` makes its stage generator (called when it is admitted);
    ``summarize(result)`` turns the generator's return value into the report's dict."""

    name: str
    start: Callable[[], StageGen]
    summarize: Callable[[Any], dict] = lambda result: {}
    priority: int = 0
    context: dict = field(default_factory=dict)  # what the job keeps (a model's Session)
    target: dict | None = None  # its measurements go to devices that run this; None: any
    # set by the scheduler
    state: str = "waiting"  # waiting, running, done, failed, cancelled
    error: str = ""
    result: Any = None
    summary: dict = field(default_factory=dict)
    served_s: float = 0.0
    trials: int = 0
    submitted: int = 0
    current: str = ""  # the stage(s) running or waiting now
    _gen: Any = None
    _pending: list = field(default_factory=list)  # (index, Stage) of its group not started
    _values: list = field(default_factory=list)  # the group's results, by index
    _left: int = 0  # stages of the group not finished
    _group: bool = False  # the generator yielded a tuple (and is sent one)
    _running: int = 0  # stages running now
    _own: tuple | None = None


@dataclass(frozen=True)
class Event:
    """One stage that ran: job, kind, where (``cpu``, a device's name, or ``job:<name>``
    under ``concurrent``), its candidates, and when (seconds from the start)."""

    job: str
    kind: str
    resource: str
    size: int
    start: float
    end: float
    task: str = ""
    error: str = ""  # the exception's type name when the stage failed (a device gone, say)
    nodes: tuple[str, ...] = ()  # a build's: the cluster nodes its candidates were built on


@dataclass
class Report:
    policy: str
    makespan_s: float
    jobs: list[Job]
    busy: dict[str, float]
    events: list[Event]
    cpu_capacity: int = 1  # the build cores (what a simulation scales from)

    def to_json(self) -> dict:
        return {"policy": self.policy, "makespan_s": round(self.makespan_s, 3),
                "cpu_capacity": self.cpu_capacity,
                "jobs": [{"name": j.name, "state": j.state, **j.summary,
                          **({"error": j.error} if j.error else {})} for j in self.jobs],
                "resources": {k: round(v, 4) for k, v in self.busy.items()}}


class StageScheduler:
    """Runs jobs' stages on ``resources`` under ``policy``; ``on_event(kind, job, info)`` is
    told of each stage's ``start`` (info: the stage) and ``end`` (info: its ``Event``: where it
    ran, whether it failed) and of each job's end, ``done`` or ``failed`` (info: the error),
    for a live table or a service's progress."""

    def __init__(self, resources: Resources, policy: str = "load-aware",
                 on_event: Callable[[str, Job, Any], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter, pin: bool = True):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
        self.resources = resources
        self.policy = policy
        self.on_event = on_event
        self.clock = clock
        self.pin = pin
        self.jobs: list[Job] = []
        self.events: list[Event] = []
        self._inprocess = threading.Lock()
        self._lock = threading.RLock()  # on_event may submit jobs
        self._done: queue.Queue = queue.Queue()
        self._counter = itertools.count()
        self._cpu_free = resources.cpu_capacity
        self._holding = False
        self._stop = False
        self._t0 = 0.0

    def submit(self, job: Job) -> Job:
        """Add a job; safe from any thread, before or during ``run``. ``ValueError`` when no
        device can time the job's target."""
        refusal = why_none_serves(self.resources.devices, job.target)
        if refusal:
            raise ValueError(f"job {job.name!r}: {refusal}")
        with self._lock:
            if any(j.name == job.name for j in self.jobs):
                raise ValueError(f"a job named {job.name!r} is already scheduled")
            job.submitted = next(self._counter)
            self.jobs.append(job)
        self._done.put(None)  # wake the loop
        return job

    def cancel(self, name: str) -> bool:
        """Cancel a waiting or running job: a stage already running finishes, none starts
        after it. False when no live job has that name."""
        with self._lock:
            job = next((j for j in self.jobs if j.name == name), None)
            if job is None or job.state not in ("waiting", "running"):
                return False
            job.state, job.current = "cancelled", ""
            if not job._running:
                self._close(job)
        self._done.put(None)
        return True

    def stop(self) -> None:
        """Make ``run(until_idle=False)`` return once the running stages end."""
        self._stop = True
        self._done.put(None)

    def run(self, until_idle: bool = True) -> Report:
        """Run until every job is done (``until_idle``) or ``stop`` is called."""
        self._t0 = self.clock()
        saved = os.sched_getaffinity(0)
        reserved = self.pin and self.policy != "concurrent" and self.resources.layout.cpus and \
            any(spec.kind == "cores" for spec, _ in self.resources.layout.devices)
        if reserved:  # searches and model fits stay off the timing cores
            os.sched_setaffinity(0, self.resources.layout.cpus)
        workers = max(4, 2 * (self.resources.cpu_capacity + len(self.resources.devices)))
        try:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stage") as pool:
                self._loop(pool, until_idle)
        finally:
            if reserved:
                os.sched_setaffinity(0, saved)
            for job in self.jobs:
                if job._own:
                    for tool in job._own:
                        tool.close()
                    job._own = None
        return self.report()

    def report(self) -> Report:
        end = max([e.end for e in self.events], default=0.0)
        return Report(self.policy, end, list(self.jobs), self.busy_fractions(end),
                      list(self.events), self.resources.cpu_capacity)

    def snapshot(self) -> dict:
        """Now: each device (busy, taken out, its busy fraction since ``run`` began), the
        CPU, the stages waiting for a resource by kind, the jobs by state."""
        with self._lock:
            now = self.clock() - self._t0 if self._t0 else 0.0
            busy = self.busy_fractions(now)
            waiting: dict[str, int] = {}
            for job in self.jobs:
                if job.state == "running":
                    for _, stage in job._pending:
                        waiting[stage.kind] = waiting.get(stage.kind, 0) + 1
            states: dict[str, int] = {}
            for job in self.jobs:
                states[job.state] = states.get(job.state, 0) + 1
            return {
                "policy": self.policy, "seconds": round(now, 3),
                "devices": [{"name": d.name, "busy": d.busy, "down": d.down or None,
                             "busy_fraction": round(busy.get(d.name, 0.0), 4)}
                            for d in self.resources.devices],
                "cpu": {"capacity": self.resources.cpu_capacity,
                        "free": self._cpu_free if self.policy != "concurrent" else None,
                        "busy_fraction": round(busy.get("cpu", 0.0), 4)},
                "queue": waiting, "jobs": states}

    def busy_fractions(self, makespan: float) -> dict[str, float]:
        """Each resource's busy time over the makespan (``cpu``: core-seconds over capacity)."""
        if makespan <= 0:
            return {}
        out: dict[str, float] = {}
        cap = self.resources.cpu_capacity
        for e in self.events:
            if e.resource == WAIT:
                continue
            if e.resource == "cpu":
                units = cap if e.kind == BUILD else 1
                out["cpu"] = out.get("cpu", 0.0) + units * (e.end - e.start) / (cap * makespan)
            else:
                out[e.resource] = out.get(e.resource, 0.0) + (e.end - e.start) / makespan
        return out

    # -- the event loop ---------------------------------------------------------------------
    def _loop(self, pool: ThreadPoolExecutor, until_idle: bool) -> None:
        while True:
            with self._lock:
                self._admit()
                self._dispatch(pool)
                live = [j for j in self.jobs if j.state in ("waiting", "running")]
                running = any(j._running for j in self.jobs)
            if not running and (self._stop or (until_idle and not live)):
                return
            item = self._done.get()
            if item is not None:
                self._finish(*item)

    def _admit(self) -> None:
        waiting = sorted((j for j in self.jobs if j.state == "waiting"),
                         key=lambda j: (-j.priority, j.submitted))
        if self.policy == "sequential":
            if any(j.state == "running" for j in self.jobs):
                return
            waiting = waiting[:1]
        for job in waiting:
            job.state = "running"
            try:
                job._gen = job.start()
                if self.policy == "concurrent":  # its own builder and runner, on all cores
                    job._own = self.resources.private_tools()
                self._advance(job, None, first=True)
            except Exception as err:  # a job that cannot start fails alone
                self._fail(job, err)

    def _dispatch(self, pool: ThreadPoolExecutor) -> None:
        ready = [j for j in self.jobs if j.state == "running" and j._pending]
        # a starved device waits least for the build that a measurement follows, not for a
        # proposal (or a model's extraction) that only leads to a build
        starved = not any(d.busy for d in self.resources.devices) and not any(
            s.kind == MEASURE for j in ready for _, s in j._pending)
        ready.sort(key=lambda j: (-j.priority, not (starved and any(
            s.kind == BUILD for _, s in j._pending)), j.served_s, j.submitted))
        self._holding = False  # a measurement ahead in line waits for the whole CPU
        for job in ready:
            for index, stage in list(job._pending):
                if self.policy == "sequential" and job._running:
                    break  # a group's stages in turn
                got = self._acquire(job, stage)
                if got is None:
                    continue
                resource, held, tool = got
                job._pending = [p for p in job._pending if p[0] != index]
                job._running += 1
                start = self.clock() - self._t0
                if self.on_event:
                    self.on_event("start", job, stage)
                args = (job, index, stage, resource, held, tool, start)
                if stage.kind == WAIT:  # on a thread of its own: waits must not fill the pool
                    threading.Thread(target=self._execute, args=args, daemon=True).start()
                else:
                    pool.submit(self._execute, *args)

    def _acquire(self, job: Job, stage: Stage):
        """``(resource name, device held or None, tool)`` if the stage can start now (its
        resources taken), else None."""
        if self.policy == "concurrent":
            builder, runner = job._own or (self.resources.builder,
                                           self.resources.devices[0].runner)
            return f"job:{job.name}", None, {BUILD: builder, MEASURE: runner}.get(stage.kind)
        if stage.kind == WAIT:
            return WAIT, None, None
        cap = self.resources.cpu_capacity
        if stage.kind == MEASURE:
            for dev in self.resources.devices:
                if dev.busy or dev.down or dev.why_not(job.target):
                    continue
                if dev.exclusive_cpu:
                    if self._cpu_free < cap:
                        self._holding = True
                        continue
                    self._cpu_free = 0
                dev.busy = True
                return dev.name, dev, dev.runner
            return None
        need = cap if stage.kind == BUILD else 1
        if self._holding or self._cpu_free < need:
            return None
        self._cpu_free -= need
        return "cpu", None, self.resources.builder if stage.kind == BUILD else None

    def _release(self, stage: Stage, device) -> None:
        if self.policy == "concurrent" or stage.kind == WAIT:
            return
        if device is not None:
            device.busy = False
            if device.exclusive_cpu:
                self._cpu_free = self.resources.cpu_capacity
        else:
            self._cpu_free += self.resources.cpu_capacity if stage.kind == BUILD else 1

    def _execute(self, job: Job, index: int, stage: Stage, resource: str, device, tool,
                 start: float) -> None:
        try:
            if stage.kind in (BUILD, MEASURE, WAIT):  # work in worker processes, or none
                value = stage.run(tool)
            else:  # TVM's Python-side compiler state (op tags, pass contexts) is not
                with self._inprocess:  # thread-safe: one in-process stage at a time
                    value = stage.run(tool)
            error = None
        except BaseException as err:  # handed to the loop thread, which decides
            value, error = None, err
        self._done.put((job, index, stage, resource, device, start, self.clock() - self._t0,
                        value, error))

    def _finish(self, job, index, stage, resource, device, start, end, value, error) -> None:
        with self._lock:
            self._release(stage, device)
            job._running -= 1
            gone = isinstance(error, DeviceUnavailable) and device is not None
            if gone:  # an infrastructure failure: the device is taken out, whoever asked
                device.down = str(error)
            nodes = tuple(sorted({b.node for b in value if b.node})) if (
                stage.kind == BUILD and isinstance(value, list)) else ()
            event = Event(job.name, stage.kind, resource, stage.size, start, end, stage.task,
                          "" if error is None else type(error).__name__, nodes)
            self.events.append(event)
            job.served_s += end - start
            if counts_as_trials(stage.kind, stage.task) and error is None:
                job.trials += stage.size
            if self.on_event:
                self.on_event("end", job, event)
            if job.state == "cancelled":
                self._close(job)
                return
            if job.state != "running":  # failed while another stage of its group ran
                return
            if gone:  # the stage waits for another device, uncharged
                job._pending.append((index, stage))
                for other in self.jobs:  # a job no device left can time would wait forever
                    if other.state == "running" and (other is job or other.target) and all(
                            d.down or d.why_not(other.target) for d in self.resources.devices):
                        self._fail(other, error)
                return
            if error is not None:
                self._fail(job, error)
                return
            job._values[index] = value
            job._left -= 1
            if not job._left:
                self._advance(job, tuple(job._values) if job._group else job._values[0])

    def _advance(self, job: Job, value, first: bool = False) -> None:
        try:
            item = next(job._gen) if first else job._gen.send(value)
            job._group = isinstance(item, tuple)
            stages = item if job._group else (item,)
            job._pending = list(enumerate(stages))
            job._values, job._left = [None] * len(stages), len(stages)
            job.current = ", ".join(s.kind if s.task in ("", s.kind) else f"{s.kind} {s.task}"
                                    for s in stages)
        except StopIteration as stop:
            job._pending, job.current, job.state, job.result = [], "", "done", stop.value
            try:
                job.summary = job.summarize(stop.value)
            except Exception as err:
                job.error = f"summary failed: {err}"
            if self.on_event:
                self.on_event("done", job, None)
        except Exception as err:
            self._fail(job, err)

    def _fail(self, job: Job, err: BaseException) -> None:
        job.state, job.current = "failed", ""
        job.error = f"{type(err).__name__}: {err}"
        self._close(job)
        if self.on_event:
            self.on_event("failed", job, err)

    def _close(self, job: Job) -> None:
        job._pending = []
        if job._gen is not None:
            job._gen.close()
