"""Command line for saved runs: ``evaluate``, ``profile``, ``runs``."""
from __future__ import annotations

import json
import sys

import typer
from rich.table import Table

from .common import console
from .logs import quiet_tvm
from .model import _print_default_functions


def evaluate(run: str = typer.Argument(..., help="run id (see `tensortune runs`) or directory"),
             repeat: int = typer.Option(20), as_json: bool = typer.Option(False, "--json")):
    """Load a saved run and time it."""
    from ..session import Session, SessionError

    try:
        session = Session.load(run)
    except SessionError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2)
    with quiet_tvm():  # loading the VM executable logs a warning per memory scope
        lat = session.evaluate(repeat=repeat)
    console.print(f"{session.run_id}: median {lat['median']:.2f} ms, mean {lat['mean']:.2f} ms, "
                  f"min {lat['min']:.2f} ms, std {lat['std']:.2f} ms over {repeat} runs")
    if as_json:
        sys.stdout.write(json.dumps({"run_id": session.run_id, **lat}) + "\n")


def profile(run: str = typer.Argument(..., help="run id (see `tensortune runs`) or directory"),
            repeat: int = typer.Option(20, help="instrumented runs (medians are reported)"),
            top: int = typer.Option(0, help="show only the N slowest functions (0: all)"),
            as_json: bool = typer.Option(False, "--json")):
    """Where a saved model's time goes, per fused function and between kernels.

    Per function: calls, milliseconds, share, GFLOP/s, fraction of the FMA peak and how it
    was scheduled (tuned, seeded, fallback, dlight, or default: TVM's unscheduled lowering);
    then the runtime's overhead between kernels."""
    from ..peers import fma_peak_gflops
    from ..session import Session, SessionError

    try:
        session = Session.load(run)
    except SessionError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2)
    try:
        peak = fma_peak_gflops(session.settings.measure.threads)
    except Exception as err:  # no C compiler or OpenMP here: the peak column stays empty
        console.print(f"[yellow]warning:[/yellow] no FMA peak ({err})")
        peak = None
    with quiet_tvm():  # loading the VM executable logs a warning per memory scope
        report = session.profile(repeat=repeat, peak_gflops=peak).to_json()
    table = Table(title=f"{session.run_id}: {report['latency_ms']:.3f} ms, "
                        f"{report['gflops']:.1f} GFLOP/s")
    for col in ("function", "calls", "ms", "share", "GFLOP/s", "of peak", "schedule"):
        table.add_column(col, justify="left" if col == "function" else "right")
    functions = report["functions"][:top] if top else report["functions"]
    for f in functions:
        table.add_row(f["name"], str(f["calls"]), f"{f['ms']:.3f}", f"{100 * f['share']:.1f}%",
                      f"{f['gflops']:.1f}",
                      "-" if f["of_peak"] is None else f"{100 * f['of_peak']:.0f}%",
                      _schedule_cell(f))
    overhead = report["overhead_ms"]
    table.add_row("(runtime between kernels)", "", f"{overhead:.3f}",
                  f"{100 * overhead / report['latency_ms']:.1f}%", "", "", "")
    console.print(table)
    console.print(f"kernels {report['kernels_ms']:.3f} ms, VM builtins {report['builtins_ms']:.3f} "
                  f"ms" + (f", FMA peak {peak:.0f} GFLOP/s" if peak else ""))
    _print_default_functions(report["default_functions"])
    if as_json:
        sys.stdout.write(json.dumps({"run_id": session.run_id, **report}) + "\n")


def _schedule_cell(f: dict) -> str:
    """A profile row's schedule: tuned, seeded, fallback, dlight, or default (highlighted: TVM's
    unscheduled lowering)."""
    how = f.get("schedule") or ("tuned" if f["tuned"] else "default")
    return "[red]default[/red]" if how == "default" else how


def runs(as_json: bool = typer.Option(False, "--json")):
    """List the runs under the home directory, newest first."""
    from ..session import list_runs

    rows = list_runs()
    table = Table(title="tensortune runs")
    for col in ("run id", "model", "trials", "tune s", "tuned ms", "torch ms"):
        table.add_column(col)
    for r in rows:
        res = r.get("results", {})
        fmt = lambda v: f"{v:.2f}" if isinstance(v, (int, float)) else "-"  # noqa: E731
        table.add_row(r["run_id"], r["spec"].get("name", "?"), str(r.get("trials", 0)),
                      fmt(r.get("stages", {}).get("tune")), fmt(res.get("tuned_ms")),
                      fmt(res.get("torch_ms")))
    console.print(table)
    if as_json:
        sys.stdout.write(json.dumps(rows) + "\n")


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate)
    app.command("profile")(profile)
    app.command("runs")(runs)
