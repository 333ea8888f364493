"""Many jobs on one machine: the load-aware scheduler against sequential and concurrent runs.

The same jobs (default: two operators and two small models) run under each policy on the
same devices (default ``cores:1``: one core reserved for timing), each in a fresh home. Then,
in this one process and quietly, every job's tuned result is timed again in interleaved
rounds (operators: the best config rebuilt and timed on the reserved core; models: built
from their records and run), so the policies' tuned latencies compare like for like. Prints
a table per policy (makespan, busy fractions, the spread of the timings taken while tuning)
and each job's re-timed latency side by side, and one JSON line.

    python benchmarks/bench_schedule.py [--jobs JOBS.json] [--devices cores:1]
        [--policies sequential,load-aware,concurrent] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from tensortune.measure import LocalBuilder, LocalRunner, MeasureInput, use_threads
from tensortune.peers.models import time_interleaved
from tensortune.records import load_records
from tensortune.orchestrate import Layout, load_jobs, parse_devices
from tensortune.orchestrate.runs import run_schedule
from tensortune.settings import Settings
from tensortune.space import Config
from tensortune.workload import Task, default_target, workload_from_dict

DEFAULT_JOBS = {"jobs": [
    {"name": "conv-24-72-37", "kind": "tune-op", "trials": 64, "workload": {
        "op": "conv2d", "n": 1, "c": 24, "h": 37, "w": 37, "filters": 72, "kh": 3, "kw": 3,
        "stride": 1, "padding": 1}},
    {"name": "dense-200-120", "kind": "tune-op", "trials": 64, "workload": {
        "op": "dense", "batch": 200, "in_features": 120, "out_features": 200, "bias": True}},
    {"name": "squeezenet", "kind": "tune-model", "model": "squeezenet1_1", "trials": 128},
    {"name": "mobilenet", "kind": "tune-model", "model": "mobilenet_v2", "trials": 128},
]}


def timing_spread(out: Path, specs) -> float:
    """Median over the tuning's records of (slowest repeat / fastest - 1): how much the
    measurements taken while tuning disagreed with themselves."""
    spreads = []
    for spec in specs:
        paths = [out / f"{spec.name}.jsonl"] if spec.kind == "tune-op" else \
            list((out / spec.name / "runs").glob("*/log.jsonl"))
        for path in paths:
            for r in load_records(path):
                if r.error.value == "none" and len(r.costs) > 1 and min(r.costs) > 0:
                    spreads.append(max(r.costs) / min(r.costs) - 1)
    return statistics.median(spreads) if spreads else float("nan")


def retime_ops(reports, specs, settings, device_cpus, rounds: int) -> dict:
    """Each policy's best config of each operator job, rebuilt and timed in interleaved
    rounds on the device's cores; seconds (median of the rounds)."""
    threads = len(device_cpus) or settings.measure.threads
    inputs, keys = [], []
    for policy, report in reports.items():
        for job, spec in zip(report.jobs, specs):
            config = job.summary.get("best_config")
            if spec.kind == "tune-op" and config:
                task = Task(workload_from_dict(spec.workload), default_target(threads))
                inputs.append(MeasureInput(task, Config.from_json(config)))
                keys.append((policy, spec.name))
    if not inputs:
        return {}
    m = settings.measure
    with LocalBuilder(m.build_workers, m.build_timeout_s) as builder, \
            LocalRunner(m, cpus=device_cpus or None) as runner:
        builds = builder.build(inputs)
        costs = {k: [] for k in keys}
        for _ in range(rounds):
            for key, res in zip(keys, runner.run(inputs, builds)):
                if res.ok:
                    costs[key].append(res.cost)
    return {k: statistics.median(v) for k, v in costs.items() if v}


def retime_models(reports, specs, rounds: int) -> dict:
    sessions = {}
    for policy, report in reports.items():
        for job, spec in zip(report.jobs, specs):
            s = job.context.get("session")
            if spec.kind == "tune-model" and job.state == "done" and s is not None:
                s.build()
                sessions[(policy, spec.name)] = s
    if not sessions:
        return {}
    x = next(iter(sessions.values())).model.random_inputs(seed=0)
    times = time_interleaved({k: (lambda s=s: s.run(*x)) for k, s in sessions.items()},
                             rounds=rounds, per_round=10)
    return {k: float(np.median(v)) for k, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", default=None, help="a jobs file (default: two operators, two "
                    "small models)")
    ap.add_argument("--devices", default="cores:1")
    ap.add_argument("--policies", default="sequential,load-aware,concurrent")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    specs = load_jobs(Path(args.jobs) if args.jobs else DEFAULT_JOBS)
    out = Path(args.out or tempfile.mkdtemp(prefix="tt-bench-schedule-"))
    base = Settings.from_env()
    layout = Layout.plan(parse_devices(args.devices))
    device_cpus = next((cpus for _, cpus in layout.devices if cpus), ())
    use_threads(layout.threads(base.measure.threads))  # the models run as they were tuned
    reports = {}
    for policy in (p.strip() for p in args.policies.split(",") if p.strip()):
        settings = type(base)(**{**base.__dict__, "home": out / policy / "home"})
        report = run_schedule(specs, policy, args.devices, settings, out / policy,
                              evaluate=False)
        reports[policy] = report
        print(f"[{policy}] makespan {report.makespan_s:.1f} s; busy " + ", ".join(
            f"{k} {v:.0%}" for k, v in report.busy.items()) + "; " + ", ".join(
            f"{j.name} {j.state}" for j in report.jobs), flush=True)
    ops = retime_ops(reports, specs, base, device_cpus, args.rounds)
    models = retime_models(reports, specs, args.rounds)
    seq = reports.get("sequential")
    print("\n| policy | makespan s | vs sequential | busy | timing spread while tuning |\n"
          "|---|---|---|---|---|")
    rows = {}
    for policy, report in reports.items():
        spread = timing_spread(out / policy, specs)
        ratio = report.makespan_s / seq.makespan_s if seq else float("nan")
        busy = ", ".join(f"{k} {v:.0%}" for k, v in report.busy.items())
        print(f"| {policy} | {report.makespan_s:.0f} | {ratio:.2f} | {busy} | {spread:.1%} |")
        rows[policy] = {"makespan_s": report.makespan_s, "vs_sequential": ratio,
                        "busy": report.busy, "timing_spread": spread, "jobs": {}}
    print("\n| job | " + " | ".join(reports) + " |\n|---|" + "---|" * len(reports))
    for spec in specs:
        cells = []
        for policy, report in reports.items():
            job = next(j for j in report.jobs if j.name == spec.name)
            secs = ops.get((policy, spec.name)) or models.get((policy, spec.name))
            during = job.summary.get("best_us")
            rows[policy]["jobs"][spec.name] = {"state": job.state, "retimed_s": secs,
                                               "best_us_while_tuning": during,
                                               "trials": job.summary.get("trials")}
            ref = ops.get(("sequential", spec.name)) or models.get(("sequential", spec.name))
            rel = f" ({secs / ref:.2f}x)" if secs and ref else ""
            unit = "us" if spec.kind == "tune-op" else "ms"
            value = "-" if not secs else (f"{secs * 1e6:.1f} us" if unit == "us"
                                          else f"{secs * 1e3:.2f} ms")
            cells.append(value + rel + (f", {during:.1f} us while tuning" if during else ""))
        print(f"| {spec.name} | " + " | ".join(cells) + " |")
    print(json.dumps({"out": str(out), "devices": args.devices, "policies": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
