"""``schedule`` (many tuning jobs under one scheduler) and ``experiment`` (a grid of them)."""
from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path
from typing import Optional

import typer
from rich.live import Live
from rich.table import Table

from ..settings import Settings
from .common import console, fail


def schedule(
    jobs_file: Path = typer.Argument(..., help="JOBS.json: {\"jobs\": [...]}, see the README"),
    policy: str = typer.Option("load-aware", help="load-aware | sequential | concurrent"),
    devices: str = typer.Option("local", help="comma-separated: local | cores:N (N cores "
                                "reserved for timing) | rpc:HOST:PORT:KEY"),
    out: Optional[Path] = typer.Option(None, help="where records and the report go "
                                       "(default: TENSORTUNE_HOME/schedules/<time>)"),
    ray: bool = typer.Option(False, "--ray", help="builds as Ray tasks, devices as Ray actors "
                             "(a local Ray cluster unless --ray-address)"),
    ray_address: Optional[str] = typer.Option(None, help="an existing Ray cluster"),
    evaluate: bool = typer.Option(True, help="time each tuned model at the end"),
    seed: int = typer.Option(0, help="random seed"),
    as_json: bool = typer.Option(False, "--json", help="end with one JSON summary line on stdout"),
) -> None:
    """Tune many jobs at once on shared cores and devices; print each job's best, the
    makespan and each resource's busy fraction."""
    from ..orchestrate import POLICIES, JobsFileError, load_jobs, parse_devices
    from ..orchestrate.runs import run_schedule

    if policy not in POLICIES:
        fail(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    try:
        specs = load_jobs(jobs_file)
        parse_devices(devices)
    except (JobsFileError, ValueError) as err:
        fail(str(err))
    settings = dataclasses.replace(Settings.from_env(), seed=seed)
    out = out or settings.home / "schedules" / time.strftime("%Y%m%d-%H%M%S")
    console.print(f"{len(specs)} job(s), policy {policy}, devices {devices}; output: {out}")
    live = LiveTable(specs)
    try:
        with Live(live.render(), console=console, refresh_per_second=2,
                  transient=False) as display:
            live.display = display
            report = run_schedule(specs, policy, devices, settings, out, ray_address, ray,
                                  on_event=live.on_event, evaluate=evaluate)
    except ValueError as err:
        fail(str(err))
    print_report(report)
    if as_json:
        print(json.dumps(report.to_json()))


class LiveTable:
    """The jobs, their current stage and trials, refreshed as stages start and end."""

    def __init__(self, specs):
        self.specs = {s.name: s for s in specs}
        self.jobs: dict = {}
        self.display = None
        self._lock = threading.Lock()

    def on_event(self, kind, job, stage) -> None:
        with self._lock:
            self.jobs[job.name] = job
        if self.display is not None:
            self.display.update(self.render())

    def render(self) -> Table:
        table = Table(title="jobs")
        for col in ("job", "kind", "state", "stage", "trials", "busy s"):
            table.add_column(col)
        for name, spec in self.specs.items():
            job = self.jobs.get(name)
            table.add_row(name, spec.kind, job.state if job else "waiting",
                          job.current if job else "", f"{job.trials if job else 0}/{spec.trials}",
                          f"{job.served_s:.0f}" if job else "0")
        return table


def print_report(report) -> None:
    table = Table(title=f"{report.policy}: makespan {report.makespan_s:.1f} s")
    for col in ("job", "state", "trials", "best us", "tuned ms", "note"):
        table.add_column(col)
    for job in report.jobs:
        s = job.summary
        table.add_row(job.name, job.state, str(s.get("trials", job.trials)),
                      _num(s.get("best_us")), _num(s.get("tuned_ms")), job.error[:60])
    console.print(table)
    console.print("busy: " + ", ".join(f"{k} {v:.0%}" for k, v in report.busy.items()))


def _num(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def experiment(
    grid_file: Path = typer.Argument(..., help="GRID.json: lists of models, tuners, trials, "
                                     "features, cost models and policies; see the README"),
    out: Optional[Path] = typer.Option(None, help="where the CSV, plots and runs go"),
    seed: int = typer.Option(0, help="random seed"),
) -> None:
    """Run every combination of a grid's parameters; one CSV row each, plus plots."""
    from ..orchestrate.experiment import GridError, load_grid, run_grid

    try:
        grid = load_grid(grid_file)
    except GridError as err:
        fail(str(err))
    settings = dataclasses.replace(Settings.from_env(), seed=seed)
    out = out or settings.home / "experiments" / time.strftime("%Y%m%d-%H%M%S")
    console.print(f"{grid.size} combination(s) in {len(grid.policies)} schedule(s); "
                  f"output: {out}")
    rows = run_grid(grid, settings, out, on_row=lambda row: console.print(row))
    console.print(f"{len(rows)} row(s): {out / 'results.csv'}; plots in {out}")


def register(app: typer.Typer) -> None:
    app.command("schedule")(schedule)
    app.command("experiment")(experiment)
