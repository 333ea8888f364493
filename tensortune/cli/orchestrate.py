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
    jobs_file: Optional[Path] = typer.Argument(None, help="JOBS.json: {\"jobs\": [...]}, see "
                                               "the README (not with --simulate)"),
    policy: str = typer.Option("load-aware", help="load-aware | sequential | concurrent"),
    devices: str = typer.Option("local", help="comma-separated: local | cores:N (N cores "
                                "reserved for timing) | rpc:HOST:PORT:KEY[:llvm:MCPU] "
                                "(a tracker's server; MCPU its CPU, default this host's)"),
    out: Optional[Path] = typer.Option(None, help="where records and the report go "
                                       "(default: TENSORTUNE_HOME/schedules/<time>)"),
    ray: bool = typer.Option(False, "--ray", help="builds as Ray tasks, devices as Ray actors "
                             "(a local Ray cluster unless --ray-address)"),
    ray_address: Optional[str] = typer.Option(None, help="an existing Ray cluster"),
    evaluate: bool = typer.Option(True, help="time each tuned model at the end"),
    seed: int = typer.Option(0, help="random seed"),
    as_json: bool = typer.Option(False, "--json", help="end with one JSON summary line on stdout"),
    simulate: Optional[Path] = typer.Option(None, help="replay a schedule run's recorded "
                                            "stages (its output directory) on --nodes and "
                                            "--sim-devices instead of tuning"),
    nodes: str = typer.Option("1,2,4,8,16,32,64", help="build nodes to simulate"),
    sim_devices: str = typer.Option("1,2,4,8,16,32", help="devices to simulate"),
    cores_per_node: int = typer.Option(0, help="build cores of a simulated node (0: the "
                                       "recorded run's)"),
) -> None:
    """Tune many jobs at once on shared cores and devices; print each job's best, the
    makespan and each resource's busy fraction. With --simulate, predict the makespan of a
    recorded run on more build nodes and devices."""
    from ..orchestrate import POLICIES, JobsFileError, load_jobs, parse_devices
    from ..orchestrate.runs import run_schedule

    if simulate is not None:
        return _simulate(simulate, nodes, sim_devices, cores_per_node, as_json)
    if jobs_file is None:
        fail("give a jobs file (JOBS.json), or --simulate RUN_DIR")

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


def _simulate(run_dir: Path, nodes: str, devices: str, cores_per_node: int,
               as_json: bool) -> None:
    from ..orchestrate.simulate import SIM_POLICIES, load_traces, simulate

    try:
        node_counts, device_counts = _counts(nodes, "--nodes"), _counts(devices, "--sim-devices")
        traces, recorded, real = load_traces(run_dir)
    except (OSError, ValueError) as err:
        fail(str(err))
    cores = cores_per_node or recorded
    table = Table(title=f"{len(traces)} job(s) of {run_dir} (ran in {real:.1f} s on {recorded} "
                        f"build core(s)); simulated makespan, s, {cores} core(s) a node")
    table.add_column("nodes")
    table.add_column("devices")
    for policy in SIM_POLICIES:
        table.add_column(policy)
    rows = []
    for n in node_counts:
        for d in device_counts:
            sims = [simulate(traces, n, d, cores, recorded, p) for p in SIM_POLICIES]
            rows += [s.to_json() for s in sims]
            table.add_row(str(n), str(d), *(f"{s.makespan_s:.1f}" for s in sims))
    console.print(table)
    if as_json:
        print(json.dumps({"run": str(run_dir), "recorded_makespan_s": round(real, 3),
                          "recorded_cores": recorded, "cores_per_node": cores, "rows": rows}))


def _counts(text: str, option: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{option}: comma-separated whole numbers, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise ValueError(f"{option}: counts of 1 or more, got {text!r}")
    return counts


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
