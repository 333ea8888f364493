"""Command line for whole models: ``tune-model``, ``evaluate``, ``profile``, ``runs``."""
from __future__ import annotations

import dataclasses
import json
import sys

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..settings import Settings
from .common import console


def tune_model(
    model: str = typer.Argument(..., help="a zoo name (resnet18, mobilenet_v2, ...) or a .onnx file"),
    trials: int = typer.Option(1000, help="total measurement budget shared by all tasks"),
    batch: int = typer.Option(1, help="batch size (zoo models)"),
    image_size: int = typer.Option(224, help="input height and width (zoo image models)"),
    scheduler: str = typer.Option("gradient", help="gradient | round-robin"),
    tuner: str = typer.Option("xgb", help="xgb | random | grid"),
    seed: int = typer.Option(0),
    layout: str = typer.Option("nhwc", help="activation layout: nhwc (channels last) | nchw"),
    winograd: bool = typer.Option(True, help="3x3 stride-1 convolutions as Winograd (nhwc)"),
    compare: bool = typer.Option(True, help="also time PyTorch eager and the untuned build"),
    as_json: bool = typer.Option(False, "--json", help="end with one JSON summary line on stdout"),
):
    """Tune a whole model, build it with the best schedules, save it, and compare."""
    from ..frontend import ModelImportError
    from ..session import Session, SessionError, task_label
    from ..tasks.graph import GraphOptions
    from ..zoo import ZOO

    settings = dataclasses.replace(Settings.from_env(), seed=seed)
    try:
        graph = GraphOptions(layout=layout, winograd=winograd)
        if model.endswith(".onnx"):
            session = Session.from_onnx(model, settings=settings, graph=graph)
        elif model in ZOO:
            session = Session.from_zoo(model, batch=batch, image_size=image_size, settings=settings,
                                       graph=graph)
        else:
            raise ModelImportError(f"{model!r} is neither a .onnx file nor a zoo model "
                                   f"({', '.join(sorted(ZOO))})")
    except (ModelImportError, OSError, ValueError) as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2)
    tasks = session.extract()
    tunable = [t for t in tasks if t.tunable]
    console.print(f"{session.model.describe()}\nrun {session.run_id}: {len(tasks)} tasks, "
                  f"{len(tunable)} tunable, {trials} trials ({scheduler})")
    for t in tasks:
        if not t.tunable:
            console.print(f"  [dim]untunable: {t.describe()}[/dim]")

    columns = [TextColumn("{task.description:<44}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[best]}"), TimeElapsedColumn()]
    try:
        with Progress(*columns, console=console) as progress:
            overall = progress.add_task("[bold]all tasks", total=trials, best="")
            bars = {task_label(t): progress.add_task(f"{task_label(t)[-38:]} x{t.weight}",
                                                     total=None, best="") for t in tunable}

            def on_step(prog, charged):
                best = prog.best
                progress.update(bars[prog.name], completed=prog.evaluator.trials,
                                best=f"{best * 1e6:.1f} us" if best < float("inf") else "")
                progress.advance(overall, charged)

            result = session.tune(trials, scheduler=scheduler, tuner=tuner, on_step=on_step)
    except (SessionError, ValueError) as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2)
    for name, why in result.skipped.items():
        console.print(f"  skipped {name}: {why}")
    session.build()
    session.save()
    lat = session.evaluate()
    summary = {"run_id": session.run_id, "model": session.model.name, "tuned_ms": lat["median"],
               "graph": session.spec["graph"],
               "tune_s": round(session.stages.get("tune", 0.0), 1), "tasks": len(tunable),
               "trials": result.trials, "torch_ms": None, "untuned_ms": None,
               "stages": {k: round(v, 2) for k, v in session.stages.items()}}
    if compare:
        summary["torch_ms"] = session.torch_latency_ms()
        tuned_module = session.compiled
        untuned = session.build(tuned=False).time(repeat=3)
        summary["untuned_ms"] = untuned.median * 1e3
        session.compiled = tuned_module
    session.results.update({k: summary[k] for k in ("tuned_ms", "torch_ms", "untuned_ms")})
    session.save()
    table = Table(title=f"tensortune: {session.model.name} (run {session.run_id})")
    table.add_column("")
    table.add_column("latency", justify="right")
    table.add_column("vs tuned", justify="right")
    for label, key in (("tensortune tuned", "tuned_ms"), ("PyTorch eager", "torch_ms"),
                       ("TVM untuned", "untuned_ms")):
        v = summary[key]
        if v is not None:
            table.add_row(label, f"{v:.2f} ms", f"{v / summary['tuned_ms']:.2f}x")
    console.print(table)
    console.print(f"saved to {session.run_dir}; stages (s): {summary['stages']}")
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")


def evaluate(run: str = typer.Argument(..., help="run id (see `tensortune runs`) or directory"),
             repeat: int = typer.Option(20), as_json: bool = typer.Option(False, "--json")):
    """Load a saved run and time it."""
    from ..session import Session, SessionError

    try:
        session = Session.load(run)
    except SessionError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2)
    lat = session.evaluate(repeat=repeat)
    console.print(f"{session.run_id}: median {lat['median']:.2f} ms, mean {lat['mean']:.2f} ms, "
                  f"min {lat['min']:.2f} ms, std {lat['std']:.2f} ms over {repeat} runs")
    if as_json:
        sys.stdout.write(json.dumps({"run_id": session.run_id, **lat}) + "\n")


def profile(run: str = typer.Argument(..., help="run id (see `tensortune runs`) or directory"),
            repeat: int = typer.Option(20, help="instrumented runs (medians are reported)"),
            top: int = typer.Option(0, help="show only the N slowest functions (0: all)"),
            as_json: bool = typer.Option(False, "--json")):
    """Where a saved model's time goes: per fused function its time, share, GFLOP/s and
    fraction of the FMA peak, and the runtime's overhead between kernels."""
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
    report = session.profile(repeat=repeat, peak_gflops=peak).to_json()
    table = Table(title=f"{session.run_id}: {report['latency_ms']:.3f} ms, "
                        f"{report['gflops']:.1f} GFLOP/s")
    for col in ("function", "calls", "ms", "share", "GFLOP/s", "of peak", "tuned"):
        table.add_column(col, justify="left" if col == "function" else "right")
    functions = report["functions"][:top] if top else report["functions"]
    for f in functions:
        table.add_row(f["name"], str(f["calls"]), f"{f['ms']:.3f}", f"{100 * f['share']:.1f}%",
                      f"{f['gflops']:.1f}",
                      "-" if f["of_peak"] is None else f"{100 * f['of_peak']:.0f}%",
                      "yes" if f["tuned"] else "no")
    overhead = report["overhead_ms"]
    table.add_row("(runtime between kernels)", "", f"{overhead:.3f}",
                  f"{100 * overhead / report['latency_ms']:.1f}%", "", "", "")
    console.print(table)
    console.print(f"kernels {report['kernels_ms']:.3f} ms, VM builtins {report['builtins_ms']:.3f} "
                  f"ms" + (f", FMA peak {peak:.0f} GFLOP/s" if peak else ""))
    if as_json:
        sys.stdout.write(json.dumps({"run_id": session.run_id, **report}) + "\n")


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
    app.command("tune-model")(tune_model)
    app.command("evaluate")(evaluate)
    app.command("profile")(profile)
    app.command("runs")(runs)
