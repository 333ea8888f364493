"""Command line for datasets of measurements: ``tensortune dataset collect|remeasure|info|features``
(the cost-model commands that read them live in ``costmodel``)."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from ..settings import Settings
from .common import console, fail, load_or_fail, split_names

dataset_app = typer.Typer(add_completion=False, no_args_is_help=True,
                          help="Collect and inspect datasets of measurements.")


# -- dataset ---------------------------------------------------------------------------------------

@dataset_app.command("collect")
def collect(
    tasks: str = typer.Option("benchmark", help="comma-separated: benchmark, a benchmark "
                              "operator (conv2d_C7, conv2d_C12, matmul_512, dense_128x768x3072) "
                              "or a zoo model (resnet18, mobilenet_v2, bert_base, ...)"),
    per_task: int = typer.Option(128, help="measured configs per task (records already in the "
                                 "file count)"),
    out: Path = typer.Option(Path("data/cpu.jsonl.gz"), help="records file (appended, resumed; "
                             "a .gz one is collected uncompressed and packed at the end)"),
    adopt: Optional[list[Path]] = typer.Option(None, help="records logs of this machine (e.g. "
                                               "a model's tuning) whose records of these tasks "
                                               "to copy in; repeatable"),
    skip: Optional[list[Path]] = typer.Option(None, help="datasets whose tasks not to collect "
                                              "(so that `costmodel --also` can pool the "
                                              "files); repeatable"),
    random_fraction: float = typer.Option(0.5, help="share of random configs; the rest are "
                                          "XGBoost-guided"),
    features: str = typer.Option("knob", help="features of the guiding XGBoost model"),
    seed: int = typer.Option(0, help="random seed"),
    as_json: bool = typer.Option(False, "--json", help="end with one JSON summary line on stdout"),
):
    """Measure random and tuner-guided configs of many tasks into one records file."""
    from ..dataset import collect_dataset, manifest_path, read_manifest, resolve_tasks
    from ..workload import default_target

    settings = dataclasses.replace(Settings.from_env(), seed=seed)
    target = settings.target or default_target(settings.measure.threads)
    held: set[str] = set()
    for path in skip or []:
        if not manifest_path(path).exists():
            fail(f"--skip {path}: no dataset manifest at {manifest_path(path)}")
        held |= set(read_manifest(path))
    try:
        resolved = resolve_tasks(split_names(tasks), target, skip=held,
                                 on_model=lambda m: console.print(f"extracting the tasks of {m}"))
        if per_task < 0 or not 0 <= random_fraction <= 1:
            raise ValueError("--per-task must be >= 0 and --random-fraction in [0, 1]")
    except (KeyError, ValueError) as err:
        fail(str(err.args[0]) if isinstance(err, KeyError) else str(err))
    adopted = []
    for path in adopt or []:
        from ..records import load_records

        if not path.exists():
            fail(f"no such records log: {path}")
        adopted += load_records(path)
    console.print(f"{len(resolved)} tasks, {per_task} configs each, into {out}")
    columns = [TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn()]
    with Progress(*columns, console=console) as progress:
        bar = {}

        def on_task(info, before):
            bar["id"] = progress.add_task(info.name[:48], total=per_task, completed=before)

        def on_result(inp, res):
            if res.error.value != "invalid_config":
                progress.advance(bar["id"])

        summary = collect_dataset(out, resolved, per_task, settings, random_fraction, features,
                                  callbacks=[on_result], on_task=on_task, adopt=adopted)
    rows = [dataclasses.asdict(s) for s in summary]
    for row in rows:
        row["best_cost"] = row["best_cost"] if row["best_cost"] < float("inf") else None
    console.print(f"measured {sum(r['random'] + r['guided'] for r in rows)} new configs")
    if as_json:
        sys.stdout.write(json.dumps({"out": str(out), "tasks": rows}) + "\n")


@dataset_app.command("remeasure")
def remeasure(
    dataset: Path = typer.Argument(..., help="dataset records file (appended; a .gz one is "
                                   "unpacked while timing and packed at the end)"),
    sessions: int = typer.Option(2, help="timing sessions per successful config, the first "
                                 "included: 2 times each config once more"),
    tasks: str = typer.Option("", help="comma-separated task names or sources (all when empty)"),
    seed: int = typer.Option(0, help="seed of the shuffled timing order"),
    as_json: bool = typer.Option(False, "--json", help="end with one JSON summary line on stdout"),
):
    """Time a dataset's configs again in a later session; loading pools each config's sessions,
    so one disturbed session moves its cost less. Resumes where a killed run stopped."""
    from ..dataset import remeasure_dataset

    settings = dataclasses.replace(Settings.from_env(), seed=seed)
    columns = [TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn()]
    with Progress(*columns, console=console) as progress:
        bar = {}

        def on_task(name, todo):
            bar["id"] = progress.add_task(name[:48], total=todo)

        try:
            summary = remeasure_dataset(dataset, sessions, settings, split_names(tasks),
                                        callbacks=[lambda i, r: progress.advance(bar["id"])],
                                        on_task=on_task)
        except (KeyError, ValueError, FileNotFoundError) as err:
            fail(str(err.args[0]) if isinstance(err, KeyError) else str(err))
    rows = [dataclasses.asdict(s) for s in summary]
    table = Table(title=f"{dataset}: re-timed {sum(r['timed'] for r in rows)} configs")
    for col in ("task", "configs", "timed", "failed", "spearman", "top10"):
        table.add_column(col, justify="left" if col == "task" else "right")
    for r in rows:
        table.add_row(r["name"], str(r["configs"]), str(r["timed"]), str(r["failed"]),
                      *("-" if r[m] is None else f"{r[m]:.3f}" for m in ("spearman", "top10")))
    console.print(table)
    if as_json:
        sys.stdout.write(json.dumps({"dataset": str(dataset), "sessions": sessions,
                                     "tasks": rows}) + "\n")


@dataset_app.command("info")
def info(dataset: Path = typer.Argument(..., help="dataset records file"),
         as_json: bool = typer.Option(False, "--json")):
    """Per-task record counts, best performance and, for configs timed in several sessions
    (``dataset remeasure``), how well one session predicts the others: Spearman and the top-10
    ratio a perfect cost model would score against that noise."""
    from ..dataset import session_noise

    ds = load_or_fail(dataset)
    noise = session_noise(ds)
    rows = [{"task": t.name, "op": t.info.op, "source": t.info.source, "records": t.n,
             "ok": t.n_ok, "failed": t.n - t.n_ok,
             "best_us": round(t.best_cost * 1e6, 2) if t.n_ok else None,
             "gflops": round(t.best_gflops, 2), "sessions": z.sessions,
             "session_spearman": z.spearman, "session_top10": z.top10}
            for t, z in zip(ds, noise)]
    table = Table(title=f"{dataset}: {len(ds)} tasks, {ds.n_records} records")
    for col in ("task", "op", "source", "records", "ok", "failed", "best us", "GFLOP/s",
                "sessions", "session spearman", "session top10"):
        table.add_column(col, justify="left" if col in ("task", "op", "source") else "right")
    for r in rows:
        table.add_row(r["task"], r["op"], r["source"], str(r["records"]), str(r["ok"]),
                      str(r["failed"]), f"{r['best_us']:.1f}" if r["best_us"] else "-",
                      f"{r['gflops']:.1f}", str(r["sessions"]),
                      *("-" if r[m] is None else f"{r[m]:.3f}"
                        for m in ("session_spearman", "session_top10")))
    console.print(table)
    scored = [z.top10 for z in noise if z.top10 is not None]
    if scored:
        console.print(f"one timing session ranking the pooled others: top-10 "
                      f"{sum(scored) / len(scored):.3f} (mean of {len(scored)} tasks)")
    if as_json:
        sys.stdout.write(json.dumps({"dataset": str(dataset), "tasks": rows}) + "\n")


@dataset_app.command("features")
def features_cmd(
    dataset: Path = typer.Argument(..., help="dataset records file"),
    features: str = typer.Option("hardware", help="comma-separated costly extractors to store"),
    jobs: int = typer.Option(2, help="processes extracting in parallel"),
    timeout_s: float = typer.Option(30.0, "--timeout-s",
                                    help="seconds per row; a config that overruns gets an invalid row"),
):
    """Precompute costly feature rows (hardware compiles every config) into the dataset's
    feature store, which ``costmodel eval|compare`` and the benchmarks read, then pack them
    (gzip) for the repository."""
    from ..dataset import features_path
    from ..features import make_extractor
    from ..features.store import COSTLY, FeatureStore, fill

    names = split_names(features)
    bad = [n for n in names if n not in COSTLY]
    if bad:
        fail(f"only costly extractors are stored ({', '.join(COSTLY)}), not {', '.join(bad)}")
    ds = load_or_fail(dataset)
    store = FeatureStore(features_path(dataset))
    inputs = [inp for t in ds for inp in t.inputs]
    for name in names:
        columns = [TextColumn(f"{name:<12}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn()]
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task(name, total=len(inputs))
            stored = store.wrap(make_extractor(name))  # one wrapper, no workers: counts rows on disk
            progress.advance(bar, sum(inp in stored for inp in inputs))
            done = fill(store, name, inputs, jobs, on_chunk=lambda n: progress.advance(bar, n),
                        timeout_s=timeout_s)
        console.print(f"{name}: computed {done} rows into {store.directory}")
    for file, rows in store.pack().items():
        console.print(f"packed {rows} rows into {store.directory / file}.gz")


def register(app: typer.Typer) -> None:
    app.add_typer(dataset_app, name="dataset")
