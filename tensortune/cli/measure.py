"""``tensortune measure export|import``: tuning rounds for a GPU this machine cannot reach.

``export`` proposes and builds the next batch of each workload's tuning (the tuner learns from
the records of earlier rounds) and writes one batch directory; ``python -m
tensortune.device_runner DIR`` times it on the GPU host (numpy and CuPy, no TVM); ``import``
appends its results to the records, and the next ``export`` goes on from there.

``--model`` puts every tunable task of a model (zoo name or ONNX file, as ``tune-model`` imports
it) into the batch (``tuner.offline.model_batch``): the shipped cost model's picks first, then
the tuner's. A model's weights do not travel: inputs are generated on the GPU host from a
seed, references above ``MODEL_REFERENCE_BYTES`` are sampled and cubins gzipped.
``tensortune tune-model MODEL --target cuda:<arch> --records LOG`` builds the model from the
best measured records.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Optional

import typer

from ..tuner import SEARCHES, TUNERS, describe
from .common import choices, console, fail

# a model's batch: each reference stored as at most this (a strided sample above it)
MODEL_REFERENCE_BYTES = 64 * 1024

measure_app = typer.Typer(add_completion=False, no_args_is_help=True,
                          help="Export batches of CUDA candidates for a GPU host; import results.")


def parse_workload(text: str):
    """A benchmark operator's name (``conv2d_C7``, ``matmul_512`` ...) or a workload as JSON,
    keys as in the records (``{"op": "matmul", "m": 64, "n": 64, "k": 64}``), inline or in a
    ``.json`` file (a fused function's script is long)."""
    from ..dataset.base import benchmark_workloads
    from ..workload import WorkloadError, workload_from_dict

    named = benchmark_workloads()
    if text in named:
        return named[text]
    if text.endswith(".json") and Path(text).is_file():
        text = Path(text).read_text()
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


def model_tasks(models: list[str], settings, image_size: int | None = None) -> list[dict]:
    """The tunable tasks of each model (a zoo name or an ``.onnx`` file, imported and extracted
    as ``tune-model`` does for ``settings.target``), one entry per distinct task: its task,
    calls per inference summed over the models, label and models."""
    from ..session import Session, task_label
    from ..zoo import ZOO

    found: dict[str, dict] = {}
    for name in models:
        if name.endswith(".onnx"):
            session = Session.from_onnx(name, settings=settings)
        elif name in ZOO:
            session = Session.from_zoo(name, image_size=image_size, settings=settings)
        else:
            raise ValueError(f"model {name!r} is neither a .onnx file nor a zoo model "
                             f"({', '.join(sorted(ZOO))})")
        for t in session.extract():
            if not t.tunable:
                continue
            entry = found.setdefault(t.key, {"task": t.task, "weight": 0,
                                             "label": task_label(t), "models": []})
            entry["weight"] += t.weight
            entry["models"].append(session.model.name)
    return list(found.values())


@measure_app.command("export")
def export(
    workloads: Optional[list[str]] = typer.Argument(
        None, help="benchmark operator names or workload JSON (inline or a .json file)"),
    out: Path = typer.Option(..., "--out", help="new directory for the batch"),
    model: Optional[list[str]] = typer.Option(
        None, "--model", help="also every tunable task of this model (zoo name or .onnx file); "
                              "repeat for several models in one batch"),
    image_size: Optional[int] = typer.Option(
        None, help="input height and width (zoo image models; default: the model's own, 224 for "
        "most, 640 for YOLO, 256 for U-Net)"),
    budget: Optional[int] = typer.Option(None, help="with --model: new candidates in all, split "
                                                    "by each task's share of the time (instead "
                                                    "of --batch per task)"),
    pool: float = typer.Option(2.0, help="with --model, a task's first round: build this many "
                                         "times its candidates and keep those the shipped "
                                         "cost model ranks best"),
    target: str = typer.Option("cuda:sm_90", help="cuda:<arch>"),
    batch: int = typer.Option(128, help="new candidates per workload or model task (built)"),
    tuner: str = typer.Option("xgb", help=choices(TUNERS, describe)),
    # knob: annealing scores thousands of configs per proposal, and itervar rows cost 70 ms each
    features: str = typer.Option("knob", help="cost-model features"),
    search: str = typer.Option("sa", help=choices(SEARCHES, describe)),
    log: Optional[Path] = typer.Option(None, help="records (default: <home>/logs/cuda.jsonl)"),
    best: int = typer.Option(0, help="also rebuild each workload's K fastest configs measured "
                                      "so far, to time them again (import skips them)"),
    seed: int = typer.Option(0, help="random seed (search and reference inputs)"),
    as_json: bool = typer.Option(False, "--json", help="end with one JSON summary line"),
):
    """Propose and build the next batch of each workload's tuning, for a GPU host to time."""
    from ..frontend import ModelImportError
    from ..measure import LocalBuilder
    from ..measure.cuda_export import ExportError, write_batch
    from ..settings import Settings
    from ..space import template_for
    from ..tuner.offline import best_batch, propose_batch
    from ..workload import Task, parse_target

    workloads, models = workloads or [], model or []
    if not workloads and not models:
        fail("nothing to export: name workloads or --model")
    if budget is not None and (budget < 1 or not models):
        fail(f"--budget {budget}: a positive number of candidates, with --model")
    if not pool >= 1:
        fail(f"--pool {pool}: at least 1 (as many built as exported)")
    new_each = batch if budget is None else 1
    if batch < 0 or best < 0 or new_each + best == 0:
        fail(f"nothing to export: --batch {batch} new and --best {best} measured candidates")
    if tuner not in TUNERS:
        fail(f"unknown tuner {tuner!r}; choose one of {', '.join(TUNERS)}")
    settings = dataclasses.replace(Settings.from_env(), seed=seed)
    try:
        cuda = parse_target(target, settings.measure.threads)
        if cuda["kind"] != "cuda":
            fail(f"measure export is for CUDA targets (cuda:<arch>), not {target!r}")
        # each operator on its template: GEMM-shaped ones on cuda.gemm
        tasks = [Task(wl, cuda, template_for(cuda, wl.prim_func()))
                 for wl in map(parse_workload, workloads)]
    except ValueError as err:
        fail(str(err))
    if (out / "manifest.json").exists():
        fail(f"{out} already holds a batch; export into a new directory")
    settings = dataclasses.replace(settings, target=cuda)
    try:
        found = model_tasks(models, settings, image_size) if models else []
    except (ModelImportError, ValueError, OSError) as err:
        fail(str(err))
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
        if found:
            console.print(f"{len(found)} tasks of {', '.join(models)}; those with no record "
                          f"yet: the shipped cost model's best of {pool:g}x as many built "
                          "random configs")
            items += _model_items(found, log, builder, settings, batch, budget, best, tuner,
                                  features, search, pool, summary)
        try:  # while the builder's directory still holds the cubins
            compact = {"compress": True, "reference_bytes": MODEL_REFERENCE_BYTES} \
                if found else {}
            path = write_batch(out, items, seed, rtol=m.rtol, atol=m.atol, log=str(log),
                               **compact)
        except ExportError as err:
            fail(str(err))
    console.print(f"batch of {len(items)} written to {out}; time it on the GPU host with "
                  f"`python -m tensortune.device_runner {out}`, then `tensortune measure import "
                  f"{out}`")
    if as_json:
        sys.stdout.write(json.dumps({"batch": str(path.parent), "candidates": len(items),
                                     "log": str(log), "tasks": summary}) + "\n")


def _model_items(found, log, builder, settings, batch, budget, best, tuner, features, search,
                 pool, summary) -> list:
    """The candidates of the models' tasks (``model_batch``), printed and summarized."""
    from ..tuner.offline import best_batch, model_batch

    labels = {e["task"].key: e for e in found}
    items = []

    def on_task(r) -> None:
        entry = labels[r.task.key]
        again = best_batch(r.task, best, log, builder) if best else []
        items.extend(again + list(r.items))
        pred = f", predicted {r.predicted * 1e6:.1f} us" if r.predicted else ""
        console.print(f"  {entry['label'][-44:]:<44} x{r.weight}: {len(r.items)} new "
                      f"({r.chosen}){f', {len(again)} best again' if best else ''}; "
                      f"{r.basis} {r.seconds * 1e6:.1f} us, {100 * r.share:.1f}% of the "
                      f"time{pred}", highlight=False)
        summary.append({"task": entry["label"], "key": r.task.key, "models": entry["models"],
                        "weight": r.weight, "built": len(r.items), "best_again": len(again),
                        "chosen": r.chosen, "share": round(r.share, 4),
                        "seconds": r.seconds, "basis": r.basis, "predicted": r.predicted})

    model_batch([(e["task"], e["weight"]) for e in found], log, builder, settings,
                per_task=batch, budget=budget, tuner=tuner, features=features, search=search,
                pool=pool, on_task=on_task,
                progress=lambda text: console.print(f"  {text}", highlight=False))
    return items


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
