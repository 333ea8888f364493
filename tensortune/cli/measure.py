"""``tensortune measure export|import``: tuning rounds for a GPU this machine cannot reach.

``export`` proposes and builds the next batch of each workload's tuning (the tuner learns from
the records of earlier rounds) and writes one batch directory; ``python -m
tensortune.device_runner DIR`` times it on the GPU host (numpy and CuPy, no TVM); ``import``
appends its results to the records, and the next ``export`` goes on from there.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Optional

import typer

from .common import console, fail

measure_app = typer.Typer(add_completion=False, no_args_is_help=True,
                          help="Export batches of CUDA candidates for a GPU host; import results.")


def parse_workload(text: str):
    """A benchmark operator's name (``conv2d_C7``, ``matmul_512`` ...) or a workload as JSON,
    keys as in the records (``{"op": "matmul", "m": 64, "n": 64, "k": 64}``)."""
    from ..dataset.base import benchmark_workloads
    from ..workload import WorkloadError, workload_from_dict

    named = benchmark_workloads()
    if text in named:
        return named[text]
    try:
        spec = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(f"workload {text!r} is neither a benchmark operator "
                         f"({', '.join(named)}) nor JSON") from None
    if not isinstance(spec, dict):
        raise ValueError(f"workload {text!r}: expected a JSON object")
    try:
        return workload_from_dict(spec)
    except (WorkloadError, TypeError, KeyError) as err:
        raise ValueError(f"workload {text!r}: {err}") from None


@measure_app.command("export")
def export(
    workloads: list[str] = typer.Argument(..., help="benchmark operator names or workload JSON"),
    out: Path = typer.Option(..., "--out", help="new directory for the batch"),
    target: str = typer.Option("cuda:sm_90", help="cuda:<arch>"),
    batch: int = typer.Option(128, help="new candidates per workload (built)"),
    tuner: str = typer.Option("xgb", help="xgb | gtuner | ensemble | random | grid"),
    # knob: annealing scores thousands of configs per proposal, and itervar rows cost 70 ms each
    features: str = typer.Option("knob", help="cost-model features"),
    search: str = typer.Option("sa", help="sa | ga | es"),
    log: Optional[Path] = typer.Option(None, help="records (default: <home>/logs/cuda.jsonl)"),
    best: int = typer.Option(0, help="also rebuild each workload's K fastest configs measured "
                                      "so far, to time them again (import skips them)"),
    seed: int = typer.Option(0, help="random seed (search and reference inputs)"),
    as_json: bool = typer.Option(False, "--json", help="end with one JSON summary line"),
):
    """Propose and build the next batch of each workload's tuning, for a GPU host to time."""
    from ..measure import LocalBuilder
    from ..measure.cuda_export import ExportError, write_batch
    from ..settings import Settings
    from ..tuner import TUNERS
    from ..tuner.offline import best_batch, propose_batch
    from ..workload import Task, parse_target

    if batch < 0 or best < 0 or batch + best == 0:
        fail(f"nothing to export: --batch {batch} new and --best {best} measured candidates")
    if tuner not in TUNERS:
        fail(f"unknown tuner {tuner!r}; choose one of {', '.join(TUNERS)}")
    try:
        tasks = [Task(parse_workload(w), parse_target(target), "cuda.generic") for w in workloads]
    except ValueError as err:
        fail(str(err))
    if tasks[0].target["kind"] != "cuda":
        fail(f"measure export is for CUDA targets (cuda:<arch>), not {target!r}")
    if (out / "manifest.json").exists():
        fail(f"{out} already holds a batch; export into a new directory")
    settings = dataclasses.replace(Settings.from_env(), seed=seed)
    log = log or settings.home / "logs" / "cuda.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    m = settings.measure
    items, summary = [], []
    with LocalBuilder(m.build_workers, m.build_timeout_s) as builder:
        for task in tasks:
            again = best_batch(task, best, log, builder) if best else []
            new = (propose_batch(task, batch, log, builder, tuner, features, settings, search)
                   if batch else [])
            console.print(f"{task.workload.describe()}: {len(new)} new candidates built"
                          + (f", {len(again)} of the best again" if best else ""))
            summary.append({"workload": task.workload.to_dict(), "built": len(new),
                            "best_again": len(again)})
            items += again + new
        try:  # while the builder's directory still holds the cubins
            path = write_batch(out, items, seed, rtol=m.rtol, atol=m.atol, log=str(log))
        except ExportError as err:
            fail(str(err))
    console.print(f"batch of {len(items)} written to {out}; time it on the GPU host with "
                  f"`python -m tensortune.device_runner {out}`, then `tensortune measure import "
                  f"{out}`")
    if as_json:
        sys.stdout.write(json.dumps({"batch": str(path.parent), "candidates": len(items),
                                     "log": str(log), "tasks": summary}) + "\n")


@measure_app.command("import")
def import_(
    batch_dir: Path = typer.Argument(..., help="a batch directory the device runner timed"),
    log: Optional[Path] = typer.Option(None, help="records (default: the one export named)"),
    as_json: bool = typer.Option(False, "--json", help="end with one JSON summary line"),
):
    """Append a timed batch's results to the records; a result already there is skipped."""
    from collections import Counter

    from ..measure.cuda_export import ExportError, read_manifest, read_results
    from ..records import RecordWriter, load_records

    try:
        manifest = read_manifest(batch_dir)
        done, missing = read_results(batch_dir)
    except ExportError as err:
        fail(str(err))
    log = log or (Path(manifest["log"]) if manifest.get("log") else None)
    if log is None:
        fail("the batch names no records file; pass --log")
    known = set()
    if log.exists():
        known = {(r.task_key, r.config) for r in load_records(log)}
    kinds, added = Counter(), 0
    with RecordWriter(log) as writer:
        for inp, res in done:
            if (inp.task.key, inp.config) in known:
                continue
            writer.append(inp, res)
            kinds[res.error.value] += 1
            added += 1
    console.print(f"{added} results appended to {log} ({', '.join(f'{k}: {v}' for k, v in kinds.items()) or 'none'}); "
                  f"{len(done) - added} already there; {len(missing)} candidates not timed yet")
    if as_json:
        sys.stdout.write(json.dumps({"log": str(log), "added": added, "errors": dict(kinds),
                                     "skipped": len(done) - added, "missing": len(missing)})
                         + "\n")


def register(app: typer.Typer) -> None:
    app.add_typer(measure_app, name="measure")
