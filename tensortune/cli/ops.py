"""Command line for single operators: ``tensortune tune-op`` and ``best``."""
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
from ..tuner import SEARCHES, TUNERS, describe
from ..workload import (OPS, Task, UntimeableTarget, WorkloadError, check_timeable, parse_target,
                        workload_from_dict)
from .common import choices, console


def _ints(text: str, name: str, count: int) -> list[int]:
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise WorkloadError(f"--{name} must be {count} comma-separated integers, got {text!r}") from None
    if len(values) != count:
        raise WorkloadError(f"--{name} must have {count} values (got {len(values)}: {text!r})")
    return values


def workload_from_options(op: str, m, n, k, b, batch, in_features, out_features, bias,
                          input_shape, filters, kernel, stride, padding, dilation, groups):
    """Build a workload from CLI options, naming any option the operator needs but lacks."""
    def need(**kw):
        missing = [name for name, v in kw.items() if v is None]
        if missing:
            flags = ", ".join("--" + x.replace("_", "-") for x in missing)
            raise WorkloadError(f"{op} needs {flags}")
        return kw

    if op == "matmul":
        return workload_from_dict({"op": op, **need(m=m, n=n, k=k)})
    if op == "batch_matmul":
        return workload_from_dict({"op": op, **need(b=b, m=m, n=n, k=k)})
    if op == "dense":
        return workload_from_dict({"op": op, "bias": bias,
                                   **need(batch=batch, in_features=in_features, out_features=out_features)})
    if op == "conv2d":
        need(input=input_shape, filters=filters)
        nn, c, h, w = _ints(input_shape, "input", 4)
        kh, kw = (kernel, kernel)
        return workload_from_dict({"op": op, "n": nn, "c": c, "h": h, "w": w, "filters": filters,
                                   "kh": kh, "kw": kw, "stride": stride, "padding": padding,
                                   "dilation": dilation, "groups": groups})
    raise WorkloadError(f"unknown operator {op!r}; known: {', '.join(sorted(OPS))}")


def tune_op(
    op: str = typer.Argument(..., help="matmul | dense | batch_matmul | conv2d"),
    m: Optional[int] = typer.Option(None, help="matmul/batch_matmul: rows of A"),
    n: Optional[int] = typer.Option(None, help="matmul/batch_matmul: columns of B"),
    k: Optional[int] = typer.Option(None, help="matmul/batch_matmul: reduction length"),
    b: Optional[int] = typer.Option(None, help="batch_matmul: batch"),
    batch: Optional[int] = typer.Option(None, help="dense: batch"),
    in_features: Optional[int] = typer.Option(None, help="dense: input features"),
    out_features: Optional[int] = typer.Option(None, help="dense: output features"),
    bias: bool = typer.Option(False, help="dense: add a bias"),
    input_shape: Optional[str] = typer.Option(None, "--input", help="conv2d: N,C,H,W"),
    filters: Optional[int] = typer.Option(None, help="conv2d: output channels"),
    kernel: int = typer.Option(3, help="conv2d: kernel size"),
    stride: int = typer.Option(1, help="conv2d: stride"),
    padding: int = typer.Option(0, help="conv2d: padding"),
    dilation: int = typer.Option(1, help="conv2d: dilation"),
    groups: int = typer.Option(1, help="conv2d: groups (= channels for depthwise)"),
    trials: int = typer.Option(256, help="measurement budget"),
    tuner: str = typer.Option("xgb", help=choices(TUNERS, describe)),
    features: str = typer.Option("knob", help="cost-model features, e.g. knob or knob+itervar"),
    search: str = typer.Option("sa", help="model-guided search: " + choices(SEARCHES, describe)),
    cost_model: str = typer.Option("fresh", help="fresh (a new XGBoost on --features) | "
                                   "pretrained (the shipped model, fine-tuned on this task)"),
    prescreen: Optional[str] = typer.Option(
        None, help="search on XGBoost over these cheap features (e.g. itervar) and let the model "
                   "pick from its shortlist: for features that compile every candidate (hardware)"),
    target: str = typer.Option("host", help="host | llvm:<mcpu> (e.g. llvm:znver4; timing "
                               "needs a host that runs it)"),
    hardware_free: bool = typer.Option(False, "--hardware-free", help="time no candidate: pick "
                                       "the config from the shipped cost model's predictions"),
    verify_top: int = typer.Option(0, help="with --hardware-free: time the K best predicted"),
    log: Optional[Path] = typer.Option(None, help="JSON-lines records (appended; resumed if present)"),
    device: str = typer.Option("local", help="where candidates are timed: local | "
                               "rpc:HOST:PORT:KEY (a TVM RPC tracker and its servers' key) | "
                               "cuda:http://HOST:PORT (a GPU host's device runner)"),
    seed: int = typer.Option(0, help="random seed"),
    as_json: bool = typer.Option(False, "--json", help="end with one JSON summary line on stdout"),
):
    """Tune one operator on this CPU (or an RPC device) and report the best kernel found."""
    from ..measure import DeviceUnavailable, RPCDevice, RPCRunner
    from ..peers import fma_peak_gflops
    from ..tuner import COST_MODELS, MODEL_TUNERS, tune_task

    try:
        workload = workload_from_options(op, m, n, k, b, batch, in_features, out_features, bias,
                                         input_shape, filters, kernel, stride, padding, dilation, groups)
    except WorkloadError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2)
    if tuner not in TUNERS:
        console.print(f"[red]error:[/red] unknown tuner {tuner!r}; choose one of {', '.join(TUNERS)}")
        raise typer.Exit(2)
    if search not in SEARCHES:
        console.print(f"[red]error:[/red] unknown search {search!r}; choose one of {', '.join(SEARCHES)}")
        raise typer.Exit(2)
    if cost_model not in COST_MODELS:
        console.print(f"[red]error:[/red] unknown cost model {cost_model!r}; choose one of "
                      f"{', '.join(COST_MODELS)}")
        raise typer.Exit(2)
    if prescreen:
        from ..features import make_extractor

        try:
            if tuner not in MODEL_TUNERS:
                raise ValueError(f"--prescreen needs a model-guided tuner "
                                 f"({', '.join(MODEL_TUNERS)}), not {tuner!r}")
            make_extractor(prescreen)
        except ValueError as err:
            console.print(f"[red]error:[/red] {err}")
            raise typer.Exit(2)
    settings = dataclasses.replace(Settings.from_env(), seed=seed)
    try:
        target = parse_target(target, settings.measure.threads)
        cuda_url = device[5:] if device.startswith("cuda:") else None
        if target["kind"] == "cuda" and (hardware_free or verify_top):
            raise ValueError("tune-op --hardware-free is for CPU targets; for CUDA use "
                             "tune-model --hardware-free --target cuda:<arch>")
        if target["kind"] == "cuda" and not cuda_url:
            check_timeable(target, "pass --device cuda:http://HOST:PORT (a GPU host running "
                           "`python -m tensortune.device_runner --serve`), or tune in rounds "
                           "with `tensortune measure export` and `measure import`")
        if cuda_url and target["kind"] != "cuda":
            raise ValueError(f"--device {device} times CUDA kernels; pass --target cuda:<arch>")
        rpc_device = None if device == "local" or cuda_url else RPCDevice.parse(device)
        if device == "local" and not hardware_free:  # refused before any work
            check_timeable(target, "tune it --hardware-free or on a host that runs it")
    except ValueError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2)
    from ..space import template_for

    task = Task(workload, target, template_for(target, workload.prim_func()))
    log = log or settings.home / "logs" / f"{workload.key}.jsonl"
    console.print(f"tuning {workload.describe()} on {target.get('mcpu') or target['arch']} "
                  f"({trials} trials, tuner {tuner}); records: {log}")

    if hardware_free or verify_top:
        if not hardware_free:
            console.print("[red]error:[/red] --verify-top goes with --hardware-free")
            raise typer.Exit(2)
        summary = _hardware_free(task, settings, verify_top, log, rpc_device)
        console.print(f"hardware-free: {summary['compiled']} candidates compiled, "
                      f"{summary['timed']} timed; predicted {summary['predicted_us']:.1f} us"
                      + (f", best timed {summary['best_us']:.1f} us" if summary["best_us"] else ""))
        if as_json:
            sys.stdout.write(json.dumps({"op": op, "workload": workload.to_dict(), **summary})
                             + "\n")
        return

    def corrupt(lineno, reason):
        console.print(f"[yellow]warning:[/yellow] {log}:{lineno}: skipped corrupt record ({reason})")

    best = {"gflops": 0.0}
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("best {task.fields[best]:.1f} GFLOP/s"), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task(op, total=trials, best=0.0)

        def on_result(inp, res):
            if res.error.value != "invalid_config":
                progress.advance(bar)
            if res.ok:
                best["gflops"] = max(best["gflops"], workload.flops / res.cost / 1e9)
                progress.update(bar, best=best["gflops"])

        runner = RPCRunner(rpc_device, settings.measure, settings.seed) if rpc_device else None
        if cuda_url:
            from ..measure.cuda_remote import CUDARemoteRunner

            runner = CUDARemoteRunner(cuda_url, settings.measure, settings.seed)
        try:
            result = tune_task(task, trials, tuner=tuner, log=log, settings=settings,
                               callbacks=[on_result], features=features, on_corrupt=corrupt,
                               search=search, prescreen=prescreen, cost_model=cost_model,
                               runner=runner)
        except (ValueError, DeviceUnavailable) as err:  # a target this CPU can't run; no device
            progress.stop()
            console.print(f"[red]error:[/red] {err}")
            raise typer.Exit(2)
        finally:
            if runner is not None:
                runner.close()
    threads = int(target.get("num-cores", 1))
    peak = fma_peak_gflops(threads) if target["kind"] == "llvm" else 0.0  # this CPU's
    gflops = workload.flops / result.best_cost / 1e9 if result.best_config else 0.0
    summary = {
        "op": op, "workload": workload.to_dict(), "best_us": result.best_cost * 1e6
        if result.best_config else None, "gflops": round(gflops, 2),
        "peak_gflops": round(peak, 1), "peak_fraction": round(gflops / peak, 4) if peak else None,
        "trials": result.trials, "invalid": result.invalid, "errors": result.errors,
        "tune_s": round(result.tune_s, 2), "stopped_early": result.stopped_early,
        "config": result.best_config.to_json() if result.best_config else None, "log": str(log),
        "device": rpc_device.name if rpc_device else (f"cuda:{cuda_url}" if cuda_url
                                                        else "local"),
    }
    table = Table(title=f"tensortune: {workload.describe()}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("best latency", f"{summary['best_us']:.1f} us" if summary["best_us"] else "none")
    table.add_row("GFLOP/s", f"{gflops:.1f}")
    if peak:
        table.add_row("FMA peak fraction", f"{100 * gflops / peak:.1f}% of {peak:.0f} GFLOP/s")
    table.add_row("trials (measured)", str(result.trials))
    table.add_row("invalid configs (not charged)", str(result.invalid))
    table.add_row("errors", ", ".join(f"{k}: {v}" for k, v in result.errors.items()) or "none")
    table.add_row("tuning time", f"{result.tune_s:.1f} s")
    console.print(table)
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
    if result.best_config is None:
        raise typer.Exit(1)


def _hardware_free(task, settings, verify_top: int, log: Path, rpc_device=None) -> dict:
    """The shipped model's pick for ``task`` (``tuner.static``); with ``verify_top`` the K best
    predicted are timed (here, or on ``rpc_device``) and recorded in ``log``, and the fastest
    is the pick."""
    from ..measure import LocalBuilder, LocalRunner, RPCRunner
    from ..records import RecordWriter
    from ..tuner.static import predict_best, shipped_model, time_top

    if verify_top and rpc_device is None:
        try:
            check_timeable(task.target, "--verify-top times candidates: drop it, or pass --device")
        except UntimeableTarget as err:
            console.print(f"[red]error:[/red] {err}")
            raise typer.Exit(2)
    with shipped_model(settings) as model:
        res = predict_best(task, model, settings, seed=settings.seed)
    if res.best is None:
        console.print("[red]error:[/red] no config of the space is valid")
        raise typer.Exit(1)
    config, best_us, timed = res.best, None, 0
    if verify_top:
        m = settings.measure
        runner = RPCRunner(rpc_device, m, settings.seed) if rpc_device else LocalRunner(m)
        with LocalBuilder(m.build_workers, m.build_timeout_s) as builder, runner, \
                RecordWriter(log) as writer:
            config, ran = time_top(res, verify_top, builder, runner, [writer.append])
        timed = min(verify_top, len(res.ranked))
        best_us = ran.cost * 1e6 if ran is not None else None
    return {"mode": "hardware-free", "compiled": res.compiled, "timed": timed,
            "predicted_us": (res.predicted_seconds or 0.0) * 1e6, "best_us": best_us,
            "config": config.to_json(), "search_s": round(res.seconds, 2), "log": str(log)}


def best(log: Path = typer.Argument(..., help="records file"),
         as_json: bool = typer.Option(False, "--json")):
    """List the best record of every task in a log."""
    from ..records import load_records

    def corrupt(lineno, reason):
        console.print(f"[yellow]warning:[/yellow] {log}:{lineno}: skipped corrupt record ({reason})")

    if not log.exists():
        console.print(f"[red]error:[/red] no such records file: {log}")
        raise typer.Exit(2)
    by_task = {}
    for rec in load_records(log, on_corrupt=corrupt):
        res = rec.to_result()
        cur = by_task.get(rec.task_key)
        if res.ok and (cur is None or res.cost < cur[1].cost):
            by_task[rec.task_key] = (rec, res)
    rows = []
    for rec, res in by_task.values():
        w = rec.to_input().task.workload
        rows.append({"workload": w.describe(), "target": rec.target.get("mcpu"),
                     "best_us": res.cost * 1e6, "gflops": w.flops / res.cost / 1e9,
                     "config": rec.config.to_json()})
    table = Table(title=str(log))
    for col in ("workload", "target", "best us", "GFLOP/s"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["workload"], str(r["target"]), f"{r['best_us']:.1f}", f"{r['gflops']:.1f}")
    console.print(table)
    if as_json:
        sys.stdout.write(json.dumps(rows) + "\n")


def register(app: typer.Typer) -> None:
    app.command("tune-op")(tune_op)
    app.command("best")(best)
