"""Command line for tuning whole models: ``tune-model`` (saved runs: ``cli.runs``)."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..settings import Settings
from ..tuner import TUNERS, describe
from ..workload import untimeable_reason
from .common import choices, console
from .logs import quiet_tvm


def tune_model(
    model: str = typer.Argument(..., help="a zoo name (resnet18, mobilenet_v2, ...) or a .onnx file"),
    trials: int = typer.Option(1000, help="total measurement budget shared by all tasks"),
    batch: int = typer.Option(1, help="batch size (zoo models)"),
    image_size: Optional[int] = typer.Option(
        None, help="input height and width (zoo image models; default: the model's own, 224 for "
        "most, 640 for YOLO, 256 for U-Net)"),
    scheduler: str = typer.Option("gradient", help="gradient | round-robin"),
    tuner: str = typer.Option("xgb", help=choices(TUNERS, describe)),
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
    records: Optional[Path] = typer.Option(
        None, "--records", help="tune nothing: build each task with its best record in this "
                                "log (e.g. what `measure import` appended); a task without one "
                                "gets the default schedule"),
    target: str = typer.Option("host", help="host | llvm:<mcpu> (e.g. llvm:znver4; timing "
                               "needs a host that runs it) | cuda:<arch> (--hardware-free or "
                               "--records)"),
    seed: int = typer.Option(0),
    layout: str = typer.Option("nhwc", help="activation layout: nhwc (channels last) | nchw"),
    winograd: bool = typer.Option(True, help="3x3 stride-1 convolutions as Winograd (nhwc)"),
    fast_math: bool = typer.Option(True, help="GELU, softmax, exp, erf, tanh as polynomials"),
    expand_depthwise: bool = typer.Option(True, help="a 1x1 convolution and the 3x3 depthwise "
                                          "one after it as one kernel (nhwc, >= 1 MiB between)"),
    grouped_conv: bool = typer.Option(True, help="grouped convolutions with under 16 outputs "
                                      "per group vectorized along the image row (nhwc)"),
    slice_first: bool = typer.Option(True, help="attention's Q, K, V sliced out of one "
                                     "projection before their permutation (one copy each)"),
    attention: bool = typer.Option(True, help="softmax(Q Kᵀ) V as one kernel per row block, "
                                   "reading Q, K, V where the projection wrote them"),
    conv1d: bool = typer.Option(True, help="1-D convolutions as one-row 2-D ones, channels "
                                "last from one to the next (nhwc)"),
    norms: bool = typer.Option(True, help="ONNX's decomposed group and instance norms as one "
                               "group norm, carried channels-last (nhwc)"),
    fold_pads: bool = typer.Option(True, help="a zero pad before a convolution as the "
                                   "convolution's own padding (causal 1-D, TensorFlow's SAME)"),
    cold_weights: bool = typer.Option(True, help="time a function with its constant weights "
                                      "flushed from the caches before each call, as in the model"),
    confirm_rounds: int = typer.Option(3, min=0, help="time each heavy task's best four configs "
                                       "this many times more after the search and keep the "
                                       "steadiest (0: the best first timing)"),
    compare: bool = typer.Option(True, help="also time PyTorch eager and the untuned build"),
    as_json: bool = typer.Option(False, "--json", help="end with one JSON summary line on stdout"),
):
    """Tune a whole model, build it with the best schedules, save it, and compare."""
    from ..frontend import ModelImportError
    from ..session import Session, SessionError
    from ..tasks.graph import GraphOptions
    from ..tasks.profile import default_function_shares
    from ..zoo import ZOO

    _check_options(scheduler, tuner, cost_model, hardware_free, verify_top, effort)
    settings = Settings.from_env()
    settings = dataclasses.replace(
        settings, seed=seed,
        measure=dataclasses.replace(settings.measure, cold_weights=cold_weights),
        search=dataclasses.replace(settings.search, confirm_rounds=confirm_rounds))
    try:
        if records is not None and (hardware_free or not records.is_file()):
            raise ValueError(f"--records {records}: " + ("tunes nothing, so not with "
                             "--hardware-free" if hardware_free else "no such file"))
        settings = dataclasses.replace(settings, target=_model_target(
            target, settings, hardware_free or records is not None, verify_top))
        graph = GraphOptions(layout=layout, winograd=winograd, fast_math=fast_math,
                             expand_depthwise=expand_depthwise, grouped_conv=grouped_conv,
                             slice_first=slice_first, attention=attention, conv1d=conv1d,
                             norms=norms, fold_pads=fold_pads)
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
    with quiet_tvm():  # legalizing a gather logs "Fast mode segfaults ..." once per call site
        tasks = session.extract()
    tunable = [t for t in tasks if t.tunable]
    console.print(f"{session.model.describe()}\nrun {session.run_id}: {len(tasks)} tasks, "
                  f"{len(tunable)} tunable, {trials} trials ({scheduler})")
    for t in tasks:
        if not t.tunable:
            console.print(f"  [dim]untunable: {t.describe()}[/dim]")
    best = None
    try:
        if records is not None:
            best, counts = _from_records(session, records)
        elif hardware_free:
            counts = _tune_hardware_free(session, verify_top, effort)
        else:
            counts = _tune_measured(session, tunable, trials, scheduler, tuner, cost_model)
    except (SessionError, ValueError) as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2)
    session.build(best=best)
    session.save()
    if untimeable_reason(session.target):  # e.g. compiled for a GPU this machine lacks
        if records is not None:
            _report_from_records(session, counts, as_json)
        else:
            _report_cross_compiled(session, counts, as_json)
        return
    lat = session.evaluate()
    defaults = default_function_shares(session.compiled)
    summary = {"run_id": session.run_id, "model": session.model.name, "tuned_ms": lat["median"],
               "graph": session.spec["graph"],
               "tune_s": round(session.stages.get("tune", 0.0), 1), "tasks": len(tunable),
               **counts, "torch_ms": None, "untuned_ms": None,
               "stages": {k: round(v, 2) for k, v in session.stages.items()},
               "default_functions": defaults}
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
    _print_default_functions(defaults)
    console.print(f"saved to {session.run_dir}; stages (s): {summary['stages']}")
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")


def _check_options(scheduler: str, tuner: str, cost_model: str, hardware_free: bool,
                   verify_top: int, effort: str) -> None:
    """Exit 2 on a bad option, before the model is imported (the target: ``_model_target``)."""
    from ..tasks.scheduler import SCHEDULERS
    from ..tuner import COST_MODELS
    from ..tuner.static import EFFORTS

    for name, value, known in (("--effort", effort, EFFORTS), ("--scheduler", scheduler,
                               SCHEDULERS), ("--tuner", tuner, TUNERS),
                               ("--cost-model", cost_model, COST_MODELS)):
        if value not in known:
            console.print(f"[red]error:[/red] {name} is one of {', '.join(known)}, not {value!r}")
            raise typer.Exit(2)
    if (verify_top or effort != "full") and not hardware_free:
        console.print("[red]error:[/red] --verify-top and --effort go with --hardware-free")
        raise typer.Exit(2)


def _print_default_functions(rows: list[dict]) -> None:
    """Each function on TVM's default schedule with its time and share of the latency."""
    if not rows:
        console.print("every function has a tuned or seeded schedule (none on TVM's default)")
        return
    share = sum(r["share"] for r in rows)
    console.print(f"[yellow]{len(rows)} function(s) on TVM's default schedule[/yellow] "
                  f"({100 * share:.1f}% of the latency):", highlight=False)
    for r in rows:
        console.print(f"  {r['name']}: {r['ms']:.3f} ms, {100 * r['share']:.1f}%", highlight=False)


def _model_target(text: str, settings, hardware_free: bool, verify_top: int) -> dict:
    """``--target`` as a target dict; one this host cannot time only hardware-free."""
    from ..workload import check_timeable, parse_target

    target = parse_target(text, settings.measure.threads)
    if not hardware_free or verify_top:  # refused here, before the import and the extraction
        check_timeable(target, "a CUDA target is tuned --hardware-free here (the analytical GPU "
                       "model over nvcc's PTX), without --verify-top, or built from records "
                       "measured on the GPU (`measure export --model`, then --records)"
                       if target["kind"] == "cuda" else "tune it --hardware-free (without "
                       "--verify-top) or on a host that runs it")
    return target


def _from_records(session, log: Path) -> tuple[dict, dict]:
    """Each tunable task's best error-free record in ``log`` (``{task key: config}``, what
    ``build`` takes) and the counts: which tasks have one, which keep the default schedule."""
    from ..records import best_record, load_records
    from ..session import task_label

    logged = load_records(log)
    best, rows = {}, []
    for t in session.extract():
        record = best_record(logged, t.task) if t.tunable else None
        if record is not None:
            best[t.key] = record.config
        rows.append({"task": task_label(t), "key": t.key, "calls": t.weight,
                     "source": "records" if record else "default",
                     "reason": "" if t.tunable else t.reason,
                     "measured_us": record.cost * 1e6 if record else None,
                     "device": record.device if record else None})
    measured = [r for r in rows if r["source"] == "records"]
    counts = {"trials": 0, "compiled": 0, "timed": 0, "records": str(log),
              "from_records": len(measured), "fallback": len(rows) - len(measured),
              "measured_ms": sum(r["calls"] * r["measured_us"] for r in measured) / 1e3,
              "sources": rows}
    session.results["tuning"] = {"mode": "records", **counts}
    console.print(f"from {log}: {len(measured)} of {len(rows)} tasks with a measured record; "
                  f"the others keep the default schedule", highlight=False)
    return best, counts


def _device_name(target: dict) -> str:
    return target.get("arch") or target.get("mcpu") or target["kind"]


def _report_from_records(session, counts: dict, as_json: bool) -> None:
    """What a CUDA model built from measured records leaves: the saved module, and per task
    its measured time or that it fell back to the default schedule."""
    table = Table(title=f"tensortune: {session.model.name} for {_device_name(session.target)} "
                        f"(run {session.run_id}), from {counts['records']}")
    for col in ("task", "calls", "measured us", "schedule"):
        table.add_column(col, justify="left" if col in ("task", "schedule") else "right")
    for r in counts["sources"]:
        us = r["measured_us"]
        table.add_row(r["task"][-48:], str(r["calls"]), f"{us:.1f}" if us else "-",
                      "measured" if us else f"default {r['reason']}".strip())
    console.print(table)
    console.print(f"{counts['from_records']} tasks measured ({counts['measured_ms']:.3f} ms of "
                  f"kernel time), {counts['fallback']} on the default schedule; saved to "
                  f"{session.run_dir} (module/); not run: "
                  f"{untimeable_reason(session.target)}")
    if as_json:
        summary = {"run_id": session.run_id, "model": session.model.name,
                   "target": session.target, "tuned_ms": None,
                   **{k: v for k, v in counts.items() if k != "sources"},
                   "tasks": counts["sources"], "module": str(session.run_dir / "module"),
                   "stages": {k: round(v, 2) for k, v in session.stages.items()}}
        sys.stdout.write(json.dumps(summary) + "\n")


def _report_cross_compiled(session, counts: dict, as_json: bool) -> None:
    """What a hardware-free run for a GPU leaves: the saved module and database, and each
    task's predicted time and throughput (nothing can be timed here)."""
    from ..session import task_label

    table = Table(title=f"tensortune: {session.model.name} for {_device_name(session.target)} "
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
    console.print(f"saved to {session.run_dir} (module/, metaschedule/); not run: "
                  f"{untimeable_reason(session.target)}")
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
    module, example = session.torch_source
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
    untuned = session.build(tuned=False, keep=False)  # the tuned build stays the session's
    out["untuned_ms"] = untuned.time(repeat=3).median * 1e3
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
    if result.confirmed:
        console.print(f"  confirmed the heavy tasks' best configs: {result.confirmed} timings")
    # every timed candidate was compiled once to be timed
    return {"trials": result.trials, "compiled": result.trials, "timed": result.trials,
            "confirmed": result.confirmed}


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


def register(app: typer.Typer) -> None:
    app.command("tune-model")(tune_model)
