"""Past this machine by simulation: a schedule run's recorded stages replayed on more build
nodes and devices (seed 002's question: how does the makespan fall with the cluster?).

A run's events (``events.jsonl``: each stage's job, kind, size, start and end) give each job's
trace: its stages in order, those that overlapped grouped (a build of one part while the
previous part is measured). ``simulate`` replays the traces as a discrete-event simulation:
nothing runs. The rules are ``StageScheduler``'s: under ``load-aware`` a stage starts as soon as
its resource is free, the job with the highest priority first, then, while no device has work,
a build, then the job served least; a build takes every build core of the cluster (its
candidates are spread over them as Ray tasks), another CPU stage one core, a measurement one
device. Under ``sequential`` one job runs at a time, one stage at a time.

What scales: a build of ``size`` candidates takes ``ceil(size / cores)`` rounds of its recorded
time per round, so more cores shorten it until every candidate has its own; every other stage
keeps its recorded duration. Devices are taken as dedicated (``cores:N`` or RPC), never
waiting for the build CPU as ``local`` does. Record the traces under ``load-aware``: a
sequential run does not show which stages formed a group.
"""
from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..tuner.stages import BUILD, MEASURE, WAIT

SIM_POLICIES = ("load-aware", "sequential")


@dataclass(frozen=True)
class Recorded:
    """One recorded stage: its kind, candidates and seconds."""

    kind: str
    size: int
    seconds: float


@dataclass(frozen=True)
class Trace:
    """One job as it ran: its groups of stages in order."""

    job: str
    groups: tuple[tuple[Recorded, ...], ...]
    priority: int = 0


def load_traces(run_dir: str | Path) -> tuple[list[Trace], int, float]:
    """The jobs' traces of a ``tensortune schedule`` run directory, the build cores it had
    and its makespan (seconds)."""
    run_dir = Path(run_dir)
    path = run_dir / "events.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} has no events.jsonl: not a schedule run's directory")
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not events:
        raise ValueError(f"{path} records no stage")
    report = json.loads((run_dir / "report.json").read_text()) if (
        run_dir / "report.json").exists() else {}
    cores = int(report.get("cpu_capacity") or 2)
    priority = {j["name"]: int(j.get("priority", 0)) for j in report.get("specs", [])
                if "name" in j}
    by_job: dict[str, list[dict]] = {}
    for e in sorted(events, key=lambda e: (e["start"], e["end"])):
        by_job.setdefault(e["job"], []).append(e)
    traces = []
    for job, stages in by_job.items():  # in the order the jobs first started
        groups: list[list[Recorded]] = []
        group_end = -math.inf
        for e in stages:
            stage = Recorded(e["kind"], int(e["size"]), max(0.0, e["end"] - e["start"]))
            if groups and e["start"] < group_end - 1e-6:  # overlaps its group: ran with it
                groups[-1].append(stage)
                group_end = max(group_end, e["end"])
            else:
                groups.append([stage])
                group_end = e["end"]
        traces.append(Trace(job, tuple(tuple(g) for g in groups), priority.get(job, 0)))
    makespan = max(e["end"] for e in events)
    return traces, cores, makespan


@dataclass
class _Job:
    trace: Trace
    order: int
    group: int = -1
    pending: list = field(default_factory=list)
    left: int = 0
    served: float = 0.0


@dataclass(frozen=True)
class Simulated:
    """A simulated run: makespan, each resource kind's busy fraction, stages replayed."""

    policy: str
    nodes: int
    devices: int
    makespan_s: float
    cpu_busy: float
    device_busy: float

    def to_json(self) -> dict:
        return {"policy": self.policy, "nodes": self.nodes, "devices": self.devices,
                "makespan_s": round(self.makespan_s, 3), "cpu_busy": round(self.cpu_busy, 4),
                "device_busy": round(self.device_busy, 4)}


def simulate(traces: list[Trace], nodes: int, devices: int, cores_per_node: int,
             recorded_cores: int, policy: str = "load-aware") -> Simulated:
    """Replay ``traces`` on ``nodes`` build nodes of ``cores_per_node`` cores and ``devices``
    devices (module docstring); ``recorded_cores``: the build cores the traces were run on."""
    if policy not in SIM_POLICIES:
        raise ValueError(f"cannot simulate policy {policy!r}; choose {', '.join(SIM_POLICIES)}")
    if nodes < 1 or devices < 1 or cores_per_node < 1:
        raise ValueError("a simulated cluster needs at least one node, one core and one device")
    cap = nodes * cores_per_node
    jobs = [_Job(t, i) for i, t in enumerate(traces)]
    for job in jobs:
        _next_group(job)
    free_cpu, free_dev, now = cap, devices, 0.0
    running: list = []  # (end, seq, job, seconds, cores, devices) of each running stage
    seq, cpu_s, dev_s = 0, 0.0, 0.0
    while True:
        live = [j for j in jobs if j.pending]
        if policy == "sequential":
            active = [j for j in jobs if j.left]
            live = [min(active, key=lambda j: (-j.trace.priority, j.order))] if active else []
            if running:
                live = []  # one stage at a time
        starved = free_dev == devices and not any(s.kind == MEASURE for j in live
                                                  for s in j.pending)
        live.sort(key=lambda j: (-j.trace.priority, not (starved and any(
            s.kind == BUILD for s in j.pending)), j.served, j.order))
        for job in live:
            for stage in list(job.pending):
                if policy == "sequential" and running:
                    break
                need_cpu = cap if stage.kind == BUILD else 0 if stage.kind in (MEASURE, WAIT) \
                    else 1
                need_dev = 1 if stage.kind == MEASURE else 0
                if need_cpu > free_cpu or need_dev > free_dev:
                    continue
                free_cpu, free_dev = free_cpu - need_cpu, free_dev - need_dev
                job.pending.remove(stage)
                seconds = _duration(stage, recorded_cores, cap)
                heapq.heappush(running, (now + seconds, seq, job, seconds, need_cpu, need_dev))
                seq += 1
        if not running:
            break
        end, _, job, seconds, used_cpu, used_dev = heapq.heappop(running)
        now = end
        free_cpu, free_dev = free_cpu + used_cpu, free_dev + used_dev
        job.served += seconds
        cpu_s += used_cpu * seconds
        dev_s += used_dev * seconds
        job.left -= 1
        if not job.left:
            _next_group(job)
    return Simulated(policy, nodes, devices, now, cpu_s / (cap * now) if now else 0.0,
                     dev_s / (devices * now) if now else 0.0)


def _next_group(job: _Job) -> None:
    job.group += 1
    if job.group < len(job.trace.groups):
        job.pending = list(job.trace.groups[job.group])
        job.left = len(job.pending)
    else:
        job.pending, job.left = [], 0


def _duration(stage: Recorded, recorded_cores: int, cores: int) -> float:
    if stage.kind != BUILD or stage.size <= 0:
        return stage.seconds
    rounds = math.ceil(stage.size / max(1, recorded_cores))
    return stage.seconds * math.ceil(stage.size / cores) / rounds
