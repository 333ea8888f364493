"""Grid experiments (seed 002's superb): every combination of a grid's parameters tuned, one
CSV row each, plus plots (results by combination, makespan by policy, stage timelines).

``GRID.json``: ``{"models": ["resnet18", {"op": "conv2d", ...}], "tuners": ["xgb"],
"trials": [64], "features": ["knob"], "cost_models": ["fresh"], "policies": ["load-aware"],
"devices": "cores:1"}``; a model is a zoo name, an ``.onnx`` path or an operator's workload.
The combinations of each policy are scheduled together, as one run of that policy.
"""
from __future__ import annotations

import csv
import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..settings import Settings
from .jobs import JobsFileError, JobSpec, load_jobs
from .scheduler import POLICIES

COLUMNS = ("policy", "job", "model", "tuner", "trials", "features", "cost_model", "state",
           "best_us", "tuned_ms", "job_s", "makespan_s", "error")
_LISTS = {"models": None, "tuners": ["xgb"], "trials": None, "features": ["knob"],
          "cost_models": ["fresh"], "policies": ["load-aware"]}


class GridError(ValueError):
    """A grid file that cannot be run; the message names the key."""


@dataclass(frozen=True)
class Grid:
    models: tuple
    tuners: tuple[str, ...]
    trials: tuple[int, ...]
    features: tuple[str, ...]
    cost_models: tuple[str, ...]
    policies: tuple[str, ...]
    devices: str = "local"

    @property
    def size(self) -> int:
        return (len(self.models) * len(self.tuners) * len(self.trials) * len(self.features)
                * len(self.cost_models) * len(self.policies))

    def specs(self) -> list[JobSpec]:
        """The jobs of one policy's run: one per combination of the other parameters."""
        raw = []
        for model, tuner, trials, feats, cm in itertools.product(
                self.models, self.tuners, self.trials, self.features, self.cost_models):
            name = "-".join(str(x) for x in (_model_name(model), tuner, trials, feats, cm))
            job = {"name": re.sub(r"[^A-Za-z0-9_.+-]", "_", name), "trials": trials,
                   "tuner": tuner, "features": feats, "cost_model": cm}
            if isinstance(model, dict):
                job.update(kind="tune-op", workload=model)
            else:
                job.update(kind="tune-model", model=model)
            raw.append(job)
        try:
            return load_jobs({"jobs": raw})
        except JobsFileError as err:
            raise GridError(str(err)) from None


def _model_name(model) -> str:
    if isinstance(model, dict):
        return "-".join(str(v) for v in model.values())
    return Path(model).stem


def load_grid(source: str | Path | dict) -> Grid:
    """The grid of a file (or its parsed dict), each list checked."""
    data = source if isinstance(source, dict) else _read(Path(source))
    if not isinstance(data, dict):
        raise GridError("a grid file is a JSON object of parameter lists")
    unknown = sorted(set(data) - set(_LISTS) - {"devices"})
    if unknown:
        raise GridError(f"unknown key(s) {', '.join(unknown)}; known: "
                        f"{', '.join(list(_LISTS) + ['devices'])}")
    values = {}
    for key, default in _LISTS.items():
        value = data.get(key, default)
        if not isinstance(value, list) or not value:
            raise GridError(f"\"{key}\" must be a non-empty list")
        values[key] = tuple(value)
    bad = [p for p in values["policies"] if p not in POLICIES]
    if bad:
        raise GridError(f"unknown policy {bad[0]!r}; choose from {', '.join(POLICIES)}")
    if not all(isinstance(t, int) and not isinstance(t, bool) and t > 0 for t in values["trials"]):
        raise GridError("\"trials\" must list positive integers")
    devices = data.get("devices", "local")
    if not isinstance(devices, str):
        raise GridError("\"devices\" is one string, e.g. \"cores:1\"")
    grid = Grid(**values, devices=devices)
    grid.specs()  # every job must be valid before anything runs
    return grid


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise GridError(f"no grid file {path}") from None
    except json.JSONDecodeError as err:
        raise GridError(f"{path} is not JSON: {err}") from None


def run_grid(grid: Grid, settings: Settings, out: Path,
             on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Run each policy's schedule; write ``results.csv`` (appended row by row) and plots."""
    from .runs import run_schedule

    out.mkdir(parents=True, exist_ok=True)
    rows, specs = [], grid.specs()
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        for policy in grid.policies:
            report = run_schedule(specs, policy, grid.devices, settings, out / policy)
            for job, spec in zip(report.jobs, specs):
                spans = [(e.start, e.end) for e in report.events if e.job == job.name]
                row = {"policy": policy, "job": job.name,
                       "model": json.dumps(spec.workload) if spec.workload else spec.model,
                       "tuner": spec.tuner, "trials": job.summary.get("trials", job.trials),
                       "features": spec.features, "cost_model": spec.cost_model,
                       "state": job.state, "best_us": job.summary.get("best_us"),
                       "tuned_ms": job.summary.get("tuned_ms"),
                       "job_s": round(max(e for _, e in spans) - min(s for s, _ in spans), 3)
                       if spans else None,
                       "makespan_s": round(report.makespan_s, 3), "error": job.error}
                writer.writerow(row)
                f.flush()
                rows.append(row)
                if on_row:
                    on_row(row)
    plot(rows, out)
    return rows


def plot(rows: list[dict], out: Path) -> list[Path]:
    """``results.png`` (each job's result by policy) and ``timeline-<policy>.png`` (the
    stages on each resource over time); the plots need matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    jobs = list(dict.fromkeys(r["job"] for r in rows))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4))
    width = 0.8 / max(1, len(policies))
    for i, policy in enumerate(policies):
        value = {r["job"]: r["best_us"] or (r["tuned_ms"] or 0) * 1e3 for r in rows
                 if r["policy"] == policy}
        ax.bar([j + i * width for j in range(len(jobs))], [value.get(j, 0) for j in jobs],
               width, label=policy)
    ax.set_xticks(range(len(jobs)), jobs, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("tuned latency (us)")
    ax.legend()
    spans = {p: next(r["makespan_s"] for r in rows if r["policy"] == p) for p in policies}
    bx.bar(list(spans), list(spans.values()))
    bx.set_ylabel("makespan (s)")
    fig.tight_layout()
    written.append(out / "results.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    for policy in policies:
        path = out / policy / "events.jsonl"
        if path.exists():
            written.append(timeline(path, out / f"timeline-{policy}.png", policy))
    return written


def timeline(events_path: Path, png: Path, title: str) -> Path:
    """A Gantt chart of one run's stages: a lane per resource, a colour per job."""
    import matplotlib.pyplot as plt

    events = [json.loads(line) for line in events_path.read_text().splitlines() if line]
    lanes = list(dict.fromkeys(e["resource"] for e in events))
    jobs = list(dict.fromkeys(e["job"] for e in events))
    colors = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(12, 1 + 0.5 * len(lanes)))
    for e in events:
        ax.barh(lanes.index(e["resource"]), e["end"] - e["start"], left=e["start"],
                color=colors(jobs.index(e["job"]) % 10), edgecolor="none")
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_xlabel("seconds")
    ax.set_title(f"{title}: stages by resource, one colour per job")
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return png
