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
    cost_model: str = typer.Option("fresh", help="fresh (AutoTVM's: a new XGBoost per task) | "
                                   "pretrained (the shipped model, fine-tuned per task)"),
    hardware_free: bool = typer.Option(False, "--hardware-free",
                                       help="time no candidate: each task's config from the "
                                            "shipped cost model's predictions (Tuna's mode)"),
    verify_top: int = typer.Option(0, help="with --hardware-free: time the K best predicted "
                                           "configs of each task and keep the fastest"),
    effort: str = typer.Option("full", help="with --hardware-free: full (a search per task, "
                               "its shortlist compiled) | fast (the template's seeds ranked, "
                               "a few compiled: a tenth of the time)"),
    target: str = typer.Option("host", help="host | llvm:<mcpu> (e.g. llvm:znver4; timing "
                               "needs a host that runs it) | cuda:<arch> (--hardware-free)"),
    seed: int = typer.Option(0),
    layout: str = typer.Option("nhwc", help="activation layout: nhwc (channels last) | nchw"),
    winograd: bool = typer.Option(True, help="3x3 stride-1 convolutions as Winograd (nhwc)"),
    fast_math: bool = typer.Option(True, help="GELU, softmax, exp, erf, tanh as polynomials"),
    expand_depthwise: bool = typer.Option(True, help="a 1x1 convolution and the 3x3 depthwise "
                                          "one after it as one kernel (nhwc, >= 1 MiB between)"),
    compare: bool = typer.Option(True, help="also time PyTorch eager and the untuned build"),
    as_json: bool = typer.Option(False, "--json", help="end with one JSON summary line on stdout"),
):
    """Tune a whole model, build it with the best schedules, save it, and compare."""
    from ..frontend import ModelImportError
    from ..session import Session, SessionError
    from ..tasks.graph import GraphOptions
    from ..zoo import ZOO

    settings = dataclasses.replace(Settings.from_env(), seed=seed)
    try:
        settings = dataclasses.replace(settings, target=_model_target(target, settings,
                                                                      hardware_free, verify_top))
        graph = GraphOptions(layout=layout, winograd=winograd, fast_math=fast_math,
                             expand_depthwise=expand_depthwise)
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

    from ..tuner.static import EFFORTS

    if effort not in EFFORTS:
        console.print(f"[red]error:[/red] --effort is one of {', '.join(EFFORTS)}, not {effort!r}")
        raise typer.Exit(2)
    if (verify_top or effort != "full") and not hardware_free:
        console.print("[red]error:[/red] --verify-top and --effort go with --hardware-free")
        raise typer.Exit(2)
    try:
        if hardware_free:
            counts = _tune_hardware_free(session, verify_top, effort)
        else:
            counts = _tune_measured(session, tunable, trials, scheduler, tuner, cost_model)
    except (SessionError, ValueError) as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2)
    session.build()
    session.save()
    if session.target.get("kind") == "cuda":  # compiled for a GPU this machine does not have
        _report_cross_compiled(session, counts, as_json)
        return
    lat = session.evaluate()
    summary = {"run_id": session.run_id, "model": session.model.name, "tuned_ms": lat["median"],
               "graph": session.spec["graph"],
               "tune_s": round(session.stages.get("tune", 0.0), 1), "tasks": len(tunable),
               **counts, "torch_ms": None, "untuned_ms": None,
               "stages": {k: round(v, 2) for k, v in session.stages.items()}}
    if compare:
        summary.update(_compare(session))
    session.results.update({k: summary[k] for k in ("tuned_ms", "torch_ms", "onnxruntime_ms",
                                                     "untuned_ms") if k in summary})
    session.save()
    table = Table(title=f"tensortune: {session.model.name} (run {session.run_id})")
    table.add_column("")
    table.add_column("latency", justify="right")
    table.add_column("vs tuned", justify="right")
    for label, key in (("tensortune tuned", "tuned_ms"), ("ONNX Runtime", "onnxruntime_ms"),
                       ("PyTorch eager", "torch_ms"), ("TVM untuned", "untuned_ms")):
        v = summary.get(key)
        if v is not None:
            table.add_row(label, f"{v:.2f} ms", f"{v / summary['tuned_ms']:.2f}x")
    console.print(table)
    console.print(f"saved to {session.run_dir}; stages (s): {summary['stages']}")
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")


def _model_target(text: str, settings, hardware_free: bool, verify_top: int) -> dict:
    """``--target`` as a target dict; CUDA only hardware-free (no GPU here to time on)."""
    from ..workload import parse_target

    target = parse_target(text, settings.measure.threads)
    if target["kind"] == "cuda" and (not hardware_free or verify_top):
        raise ValueError("a CUDA target is tuned --hardware-free here (the analytical GPU model "
                         "over nvcc's PTX), without --verify-top: this machine has no GPU")
    return target


def _report_cross_compiled(session, counts: dict, as_json: bool) -> None:
    """What a hardware-free run for a GPU leaves: the saved module and database, and each
    task's predicted time and throughput (nothing can be timed here)."""
    from ..session import task_label

    table = Table(title=f"tensortune: {session.model.name} for {session.target.get('arch')} "
                        f"(run {session.run_id}), predicted")
    for col in ("task", "calls", "predicted us", "TFLOP/s"):
        table.add_column(col, justify="left" if col == "task" else "right")
    rows = []
    for t in session.extract():
        res = session.static.get(t.key)
        if res is None or not res.ranked:
            continue
        tflops, seconds = res.ranked[0][1], res.predicted_seconds
        rows.append({"task": task_label(t), "calls": t.weight,
                     "predicted_us": seconds * 1e6 if seconds else None, "tflops": tflops})
        table.add_row(task_label(t)[-48:], str(t.weight),
                      f"{seconds * 1e6:.1f}" if seconds else "-", f"{tflops or 0:.2f}")
    console.print(table)
    console.print(f"saved to {session.run_dir} (module/, metaschedule/); not run: no "
                  f"{session.target['kind']} device here")
    if as_json:
        summary = {"run_id": session.run_id, "model": session.model.name,
                   "target": session.target, "tuned_ms": None, **counts, "tasks": rows,
                   "module": str(session.run_dir / "module"),
                   "database": str(session.run_dir / "metaschedule"),
                   "stages": {k: round(v, 2) for k, v in session.stages.items()}}
        sys.stdout.write(json.dumps(summary) + "\n")


def _compare(session) -> dict:
    """The tuned module, ONNX Runtime (when installed) and PyTorch eager timed in interleaved
    rounds on the same inputs (wall clock, numpy in and out), and the untuned build."""
    import tempfile
    from pathlib import Path

    import numpy as np

    from ..peers.models import (ModelPeer, export_onnx, onnxruntime_peer, time_interleaved,
                                torch_peer, warm)

    threads = session.settings.measure.threads
    module, example = session._torch
    inputs = ([t.numpy() for t in example] if module is not None
              else session.model.random_inputs(seed=0))
    peers = {"tuned_ms": ModelPeer("tensortune", lambda a: session.run(*a))}
    if module is not None:
        peers["torch_ms"] = torch_peer(module, threads)
    try:
        import onnxruntime  # noqa: F401  (the bench extra)

        onnx_path = (Path(session.spec["path"]) if session.spec.get("source") == "onnx" else
                     export_onnx(module, tuple(example), Path(tempfile.mkdtemp()) / "m.onnx"))
        peers["onnxruntime_ms"] = onnxruntime_peer(onnx_path, threads)
    except Exception as err:  # not installed, or the export failed: compare without it
        console.print(f"[dim]ONNX Runtime not compared: {str(err).splitlines()[0][:120]}[/dim]")
    for peer in peers.values():
        warm(peer, inputs)
    times = time_interleaved({k: (lambda p=p: p.run(inputs)) for k, p in peers.items()},
                             rounds=3, per_round=10)
    out = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    tuned_module = session.compiled
    out["untuned_ms"] = session.build(tuned=False).time(repeat=3).median * 1e3
    session.compiled = tuned_module
    return out


def _tune_measured(session, tunable, trials, scheduler, tuner, cost_model) -> dict:
    """Tune with measurements under the task scheduler, with a progress bar per task."""
    from ..session import task_label

    columns = [TextColumn("{task.description:<44}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[best]}"), TimeElapsedColumn()]
    with Progress(*columns, console=console) as progress:
        overall = progress.add_task("[bold]all tasks", total=trials, best="")
        bars = {task_label(t): progress.add_task(f"{task_label(t)[-38:]} x{t.weight}",
                                                 total=None, best="") for t in tunable}

        def on_step(prog, charged):
            best = prog.best
            progress.update(bars[prog.name], completed=prog.evaluator.trials,
                            best=f"{best * 1e6:.1f} us" if best < float("inf") else "")
            progress.advance(overall, charged)

        result = session.tune(trials, scheduler=scheduler, tuner=tuner, on_step=on_step,
                              cost_model=cost_model)
    for name, why in result.skipped.items():
        console.print(f"  skipped {name}: {why}")
    # every timed candidate was compiled once to be timed
    return {"trials": result.trials, "compiled": result.trials, "timed": result.trials}


def _tune_hardware_free(session, verify_top: int, effort: str = "full") -> dict:
    """Pick configs from the shipped model's predictions; print each task's pick."""
    from ..session import task_label

    def on_task(t, res):
        pred = res.predicted_seconds
        console.print(f"  {task_label(t)[-44:]:<44} x{t.weight}: {res.compiled} compiled, "
                      + (f"predicted {pred * 1e6:.1f} us" if pred else "no valid config"),
                      highlight=False)

    counts = session.tune_hardware_free(verify_top=verify_top, on_task=on_task, effort=effort)
    console.print(f"hardware-free: {counts['compiled']} candidates compiled, {counts['timed']} "
                  f"timed; predicted {counts['predicted_ms']:.2f} ms in the tuned functions")
    return {"trials": counts["timed"], "compiled": counts["compiled"], "timed": counts["timed"],
            "predicted_ms": counts["predicted_ms"]}


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
    """Where a saved model's time goes, per fused function and between kernels.

    Per function: calls, milliseconds, share, GFLOP/s and fraction of the FMA peak; then the
    runtime's overhead between kernels."""
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
