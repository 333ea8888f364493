"""One schedule run end to end: devices laid out, jobs made, stages scheduled, tuned models
timed, the report written (``report.json``, ``events.jsonl``) under the run's directory."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ..settings import Settings
from .devices import open_resources
from .jobs import JobSpec, evaluate_model, make_job
from .scheduler import Report, StageScheduler


def run_schedule(specs: list[JobSpec], policy: str, devices: str, settings: Settings,
                 out: Path, ray_address: str | None = None, use_ray: bool = False,
                 on_event: Callable | None = None, evaluate: bool = True,
                 on_scheduler: Callable[[StageScheduler], None] | None = None) -> Report:
    """Schedule ``specs`` under ``policy`` on ``devices``; with ``evaluate`` each tuned model
    is built and timed afterwards (outside the makespan, the same for every policy)."""
    out.mkdir(parents=True, exist_ok=True)
    layout, resources = open_resources(devices, settings, use_ray, ray_address)
    threads = layout.threads(settings.measure.threads)
    try:
        sched = StageScheduler(resources, policy, on_event=on_event)
        for spec in specs:
            sched.submit(make_job(spec, settings, out, threads))
        if on_scheduler:
            on_scheduler(sched)
        report = sched.run()
    finally:
        resources.close()
    if evaluate:
        for job, spec in zip(report.jobs, specs):
            if spec.kind == "tune-model" and job.state == "done":
                ms = evaluate_model(job)
                job.summary["tuned_ms"] = None if ms is None else round(ms, 4)
    write_report(report, out, devices, [s.to_json() for s in specs])
    return report


def write_report(report: Report, out: Path, devices: str, specs: list[dict]) -> None:
    (out / "report.json").write_text(json.dumps(
        {**report.to_json(), "devices": devices, "specs": specs}, indent=1) + "\n")
    with open(out / "events.jsonl", "w") as f:
        for e in report.events:
            f.write(json.dumps({"job": e.job, "kind": e.kind, "resource": e.resource,
                                "size": e.size, "start": round(e.start, 4),
                                "end": round(e.end, 4), "task": e.task,
                                **({"nodes": list(e.nodes)} if e.nodes else {}),
                                **({"error": e.error} if e.error else {})}) + "\n")
