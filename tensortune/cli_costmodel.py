"""Command line for cost-model datasets and evaluation: ``tensortune dataset collect|info`` and
``tensortune costmodel eval|compare``."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from .settings import Settings

console = Console(stderr=True)
dataset_app = typer.Typer(add_completion=False, no_args_is_help=True,
                          help="Collect and inspect datasets of measurements.")
costmodel_app = typer.Typer(add_completion=False, no_args_is_help=True,
                            help="Evaluate cost models on a dataset.")


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(2)


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _load(path: Path):
    from .dataset import load_dataset

    if not path.exists():
        _fail(f"no such dataset: {path}")

    def corrupt(lineno, reason):
        console.print(f"[yellow]warning:[/yellow] {path}:{lineno}: skipped corrupt record "
                      f"({reason})")

    try:
        dataset = load_dataset(path, on_corrupt=corrupt)
    except ValueError as err:
        _fail(str(err))
    if not len(dataset):
        _fail(f"{path} holds no records")
    return dataset


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
    random_fraction: float = typer.Option(0.5, help="share of random configs; the rest are "
                                          "XGBoost-guided"),
    features: str = typer.Option("knob", help="features of the guiding XGBoost model"),
    seed: int = typer.Option(0, help="random seed"),
    as_json: bool = typer.Option(False, "--json", help="end with one JSON summary line on stdout"),
):
    """Measure random and tuner-guided configs of many tasks into one records file."""
    from .dataset_collect import collect_dataset, resolve_tasks
    from .workload import default_target

    settings = dataclasses.replace(Settings.from_env(), seed=seed)
    target = settings.target or default_target(settings.measure.threads)
    try:
        resolved = resolve_tasks(_names(tasks), target,
                                 on_model=lambda m: console.print(f"extracting the tasks of {m}"))
        if per_task < 0 or not 0 <= random_fraction <= 1:
            raise ValueError("--per-task must be >= 0 and --random-fraction in [0, 1]")
    except (KeyError, ValueError) as err:
        _fail(str(err.args[0]) if isinstance(err, KeyError) else str(err))
    adopted = []
    for path in adopt or []:
        from .records import load_records

        if not path.exists():
            _fail(f"no such records log: {path}")
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
    from .dataset_collect import remeasure_dataset

    settings = dataclasses.replace(Settings.from_env(), seed=seed)
    columns = [TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn()]
    with Progress(*columns, console=console) as progress:
        bar = {}

        def on_task(name, todo):
            bar["id"] = progress.add_task(name[:48], total=todo)

        try:
            summary = remeasure_dataset(dataset, sessions, settings, _names(tasks),
                                        callbacks=[lambda i, r: progress.advance(bar["id"])],
                                        on_task=on_task)
        except (KeyError, ValueError, FileNotFoundError) as err:
            _fail(str(err.args[0]) if isinstance(err, KeyError) else str(err))
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
    from .dataset import session_noise

    ds = _load(dataset)
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
    feature store, which ``costmodel eval|compare`` and the benchmarks read."""
    from .dataset import features_path
    from .features import make_extractor
    from .features.store import COSTLY, FeatureStore, fill

    names = _names(features)
    bad = [n for n in names if n not in COSTLY]
    if bad:
        _fail(f"only costly extractors are stored ({', '.join(COSTLY)}), not {', '.join(bad)}")
    ds = _load(dataset)
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


def _bank(dataset: Path, use_store: bool, history: Path | None = None):
    from .costmodel_eval import FeatureBank
    from .dataset import features_path
    from .features.store import FeatureStore

    also = [features_path(history)] if history is not None else []
    return FeatureBank(FeatureStore(features_path(dataset), also=also) if use_store else None)


HISTORY_HELP = ("by-task: pretrain on this dataset's tasks (e.g. another machine's records) and "
                "score every task of --dataset (or of --holdout)")
TWINS_HELP = "with --history: keep its twins of the scored tasks (same shapes) in pretraining"


# -- cost models -----------------------------------------------------------------------------------

def _metric(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _report_table(title: str, reports) -> Table:
    from .costmodel_eval import METRICS

    table = Table(title=title, box=box.SIMPLE_HEAD)
    # "top10 on": tasks with enough test records for top-10; fewer than "tasks" after finetune
    for col in ("model", "features", *METRICS, "tasks", "top10 on", "skipped", "extract s",
                "fit s"):
        table.add_column(col, justify="left" if col in ("model", "features") else "right",
                         no_wrap=True)
    for r in reports:
        mean = r.mean()
        table.add_row(r.model, r.features, *(_metric(mean[m]) for m in METRICS),
                      str(len(r.scores)), str(r.counts().get("top10", 0)), str(len(r.skipped)),
                      f"{r.extract_s:.1f}", f"{r.fit_s:.1f}")
    return table


def _task_table(report) -> Table:
    from .costmodel_eval import METRICS

    table = Table(title=f"{report.model} on {report.features} ({report.split})",
                  box=box.SIMPLE_HEAD)
    for col in ("task", "op", "train", "test", *METRICS):
        table.add_column(col, justify="left" if col in ("task", "op") else "right", no_wrap=True)
    for s in report.scores:
        table.add_row(s.task + (" *" if s.note else ""), s.op, str(s.n_train), str(s.n_test),
                      *(_metric(s.metric(m)) for m in METRICS))
    mean = report.mean()
    table.add_row("[bold]mean", "", "", "", *(_metric(mean[m]) for m in METRICS))
    return table


def _print_wide(table: Table) -> None:
    """Print at the table's natural width: a pipe's 80 columns would squeeze the names."""
    natural = Measurement.get(console, console.options.update_width(1000), table).maximum
    if natural <= console.width:
        console.print(table)
    else:
        Console(stderr=True, width=natural).print(table)


def _run(fn, **kw):
    try:
        return fn(**kw)
    except (KeyError, ValueError) as err:
        _fail(str(err.args[0]) if isinstance(err, KeyError) else str(err))


@costmodel_app.command("eval")
def eval_cmd(
    dataset: Path = typer.Option(..., help="dataset records file"),
    model: str = typer.Option("xgb-rank", help="xgb-rank | xgb-reg | gtuner | ensemble"),
    features: str = typer.Option("knob+itervar", help="e.g. knob, itervar, curve, knob+itervar"),
    split: str = typer.Option("by-task", help="by-task (transfer to unseen tasks) | within-task"),
    holdout: Optional[str] = typer.Option(None, help="by-task: comma-separated held-out task "
                                          "names or sources (default: every task, in folds)"),
    folds: int = typer.Option(4, help="by-task without --holdout: task-level folds"),
    finetune: int = typer.Option(0, help="by-task: records of each held-out task to fine-tune on"),
    train_fraction: float = typer.Option(0.5, help="within-task: share of records to train on"),
    seed: int = typer.Option(0),
    store: bool = typer.Option(True, help="read and keep costly feature rows (hardware) in "
                               "the dataset's feature store"),
    label: Optional[str] = typer.Option(None, help="training labels: relative (per-task best, "
                                        "AutoTVM's) | absolute (TFLOP/s); default: the model's"),
    history: Optional[Path] = typer.Option(None, help=HISTORY_HELP),
    history_twins: bool = typer.Option(False, help=TWINS_HELP),
    as_json: bool = typer.Option(False, "--json", help="end with one JSON object on stdout"),
):
    """Fit one cost model and report Pearson, Spearman, pairwise accuracy and top-k ratios."""
    from .costmodel_eval import MODELS, evaluate

    if model not in MODELS:
        _fail(f"unknown cost model {model!r}; choose one of {', '.join(MODELS)}")
    ds = _load(dataset)
    report = _run(evaluate, dataset=ds, model=model, features=features, split=split,
                  holdout=_names(holdout or ""), folds=folds, finetune=finetune,
                  train_fraction=train_fraction, seed=seed, bank=_bank(dataset, store, history),
                  label=label, on_progress=lambda name: console.print(f"  scored {name}"),
                  history=_load(history) if history else None, history_twins=history_twins)
    _print_wide(_task_table(report))
    for s in report.scores:
        if s.note:
            console.print(f"  * {s.task}: {s.note}")
    for task, reason in report.skipped:
        console.print(f"  [yellow]skipped[/yellow] {task}: {reason}")
    if as_json:
        sys.stdout.write(json.dumps({"dataset": str(dataset), **report.to_json()}) + "\n")


@costmodel_app.command("compare")
def compare_cmd(
    dataset: Path = typer.Option(..., help="dataset records file"),
    models: str = typer.Option("xgb-rank,xgb-reg,gtuner",
                               help="comma-separated cost models (ensemble too)"),
    features: Optional[str] = typer.Option(None, help="comma-separated feature sets (default: "
                                           "knob, itervar, curve, knob+itervar, and the "
                                           "hardware ones when available)"),
    split: str = typer.Option("by-task", help="by-task | within-task"),
    holdout: Optional[str] = typer.Option(None, help="by-task: held-out task names or sources"),
    folds: int = typer.Option(4, help="by-task without --holdout: task-level folds"),
    finetune: int = typer.Option(0, help="by-task: records of each held-out task to fine-tune on"),
    train_fraction: float = typer.Option(0.5, help="within-task: share of records to train on"),
    seed: int = typer.Option(0),
    store: bool = typer.Option(True, help="read and keep costly feature rows (hardware) in "
                               "the dataset's feature store"),
    label: Optional[str] = typer.Option(None, help="training labels: relative (per-task best, "
                                        "AutoTVM's) | absolute (TFLOP/s); default: the model's"),
    history: Optional[Path] = typer.Option(None, help=HISTORY_HELP),
    history_twins: bool = typer.Option(False, help=TWINS_HELP),
    as_json: bool = typer.Option(False, "--json", help="end with one JSON line on stdout"),
):
    """Every model x feature combination on one dataset, in one table."""
    from .costmodel_eval import MODELS, default_feature_sets, evaluate

    model_names = _names(models)
    unknown = [m for m in model_names if m not in MODELS]
    if unknown or not model_names:
        _fail(f"unknown cost model(s) {unknown or models!r}; choose from {', '.join(MODELS)}")
    feature_sets = _names(features) if features else list(default_feature_sets())
    ds = _load(dataset)
    past = _load(history) if history else None
    bank = _bank(dataset, store, history)
    reports = []
    for fs in feature_sets:
        for m in model_names:
            console.print(f"{m} on {fs} ...")
            reports.append(_run(evaluate, dataset=ds, model=m, features=fs, split=split,
                                holdout=_names(holdout or ""), folds=folds, finetune=finetune,
                                train_fraction=train_fraction, seed=seed, bank=bank,
                                label=label, history=past, history_twins=history_twins))
    _print_wide(_report_table(f"{dataset}: {len(ds)} tasks, {split}"
                              + (f", pretrained on {history}" if history else "")
                              + (f", finetune {finetune}" if finetune else ""), reports))
    notes = {(t, why) for r in reports for t, why in r.skipped}
    for task, reason in sorted(notes):
        console.print(f"  [yellow]skipped[/yellow] {task}: {reason}")
    if as_json:
        doc = {"dataset": str(dataset), "split": split, "finetune": finetune,
               "holdout": _names(holdout or ""), "rows": [r.to_json() for r in reports],
               "history": str(history) if history else None, "history_twins": history_twins}
        sys.stdout.write(json.dumps(doc) + "\n")


def register(app: typer.Typer) -> None:
    app.add_typer(dataset_app, name="dataset")
    app.add_typer(costmodel_app, name="costmodel")
