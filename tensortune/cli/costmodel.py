"""Command line for cost-model evaluation: ``tensortune costmodel eval|compare``, on the
datasets the ``dataset`` commands collect."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from ..evaluation import MODELS
from .common import choices, console, fail, load_or_fail, split_names

costmodel_app = typer.Typer(add_completion=False, no_args_is_help=True,
                            help="Evaluate cost models on a dataset.")


def _bank(dataset: Path, use_store: bool, others: list[Path]):
    """Features kept in ``dataset``'s store, read from the ``others``' stores too."""
    from ..dataset import features_path
    from ..evaluation import FeatureBank
    from ..features.store import FeatureStore

    also = [features_path(p) for p in others]
    return FeatureBank(FeatureStore(features_path(dataset), also=also) if use_store else None)


def _load_joined(dataset: Path, also: Optional[list[Path]]):
    """``dataset``'s tasks, then each ``also`` file's."""
    ds = load_or_fail(dataset)
    for path in also or []:
        try:
            ds = ds.join(load_or_fail(path))
        except ValueError as err:
            fail(str(err))
    return ds


HISTORY_HELP = ("by-task: pretrain on this dataset's tasks (e.g. another machine's records) and "
                "score every task of --dataset (or of --holdout)")
TWINS_HELP = "with --history: keep its twins of the scored tasks (same shapes) in pretraining"
ALSO_HELP = ("more datasets of the same kind of machine whose tasks join --dataset's, trained "
             "and scored alike (twins across files share a fold); repeatable")


# -- cost models -----------------------------------------------------------------------------------

def _metric(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _report_table(title: str, reports) -> Table:
    from ..evaluation import METRICS

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
    from ..evaluation import METRICS

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


def _source_table(reports) -> Table:
    """By-model: one row per report and held-out source model, its tasks' metric means."""
    from ..evaluation import METRICS

    table = Table(title="per held-out model", box=box.SIMPLE_HEAD)
    for col in ("model", "features", "held out", "tasks", *METRICS):
        table.add_column(col, justify="right" if col == "tasks" or col in METRICS else "left",
                         no_wrap=True)
    for r in reports:
        for source, means in r.by_source().items():
            table.add_row(r.model, r.features, source, str(means["tasks"]),
                          *(_metric(means[m]) for m in METRICS))
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
        fail(str(err.args[0]) if isinstance(err, KeyError) else str(err))


@costmodel_app.command("eval")
def eval_cmd(
    dataset: Path = typer.Option(..., help="dataset records file"),
    also: Optional[list[Path]] = typer.Option(None, help=ALSO_HELP),
    model: str = typer.Option("xgb-rank", help=choices(MODELS)),
    features: str = typer.Option("knob+itervar", help="e.g. knob, itervar, curve, knob+itervar"),
    split: str = typer.Option("by-task", help="by-task (transfer to unseen tasks) | by-model (leave "
                                             "one model out) | within-task"),
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
    from ..evaluation import evaluate

    if model not in MODELS:
        fail(f"unknown cost model {model!r}; choose one of {', '.join(MODELS)}")
    ds = _load_joined(dataset, also)
    bank = _bank(dataset, store, [*(also or []), *([history] if history else [])])
    report = _run(evaluate, dataset=ds, model=model, features=features, split=split,
                  holdout=split_names(holdout or ""), folds=folds, finetune=finetune,
                  train_fraction=train_fraction, seed=seed, bank=bank,
                  label=label, on_progress=lambda name: console.print(f"  scored {name}"),
                  history=load_or_fail(history) if history else None,
                  history_twins=history_twins)
    _print_wide(_task_table(report))
    if split == "by-model":
        _print_wide(_source_table([report]))
    for s in report.scores:
        if s.note:
            console.print(f"  * {s.task}: {s.note}")
    for task, reason in report.skipped:
        console.print(f"  [yellow]skipped[/yellow] {task}: {reason}")
    if as_json:
        sys.stdout.write(json.dumps({"dataset": str(dataset), "also": [str(p) for p in also or []],
                                     **report.to_json()}) + "\n")


@costmodel_app.command("compare")
def compare_cmd(
    dataset: Path = typer.Option(..., help="dataset records file"),
    also: Optional[list[Path]] = typer.Option(None, help=ALSO_HELP),
    models: str = typer.Option("xgb-rank,xgb-reg,gtuner",
                               help="comma-separated cost models: " + choices(MODELS)),
    features: Optional[str] = typer.Option(None, help="comma-separated feature sets (default: "
                                           "knob, itervar, curve, knob+itervar, and the "
                                           "hardware ones when available)"),
    split: str = typer.Option("by-task", help="by-task | by-model | within-task"),
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
    from ..evaluation import default_feature_sets, evaluate

    model_names = split_names(models)
    unknown = [m for m in model_names if m not in MODELS]
    if unknown or not model_names:
        fail(f"unknown cost model(s) {unknown or models!r}; choose from {', '.join(MODELS)}")
    feature_sets = split_names(features) if features else list(default_feature_sets())
    ds = _load_joined(dataset, also)
    past = load_or_fail(history) if history else None
    bank = _bank(dataset, store, [*(also or []), *([history] if history else [])])
    reports = []
    for fs in feature_sets:
        for m in model_names:
            console.print(f"{m} on {fs} ...")
            reports.append(_run(evaluate, dataset=ds, model=m, features=fs, split=split,
                                holdout=split_names(holdout or ""), folds=folds,
                                finetune=finetune,
                                train_fraction=train_fraction, seed=seed, bank=bank,
                                label=label, history=past, history_twins=history_twins))
    joined = "".join(f" + {p}" for p in also or [])
    _print_wide(_report_table(f"{dataset}{joined}: {len(ds)} tasks, {split}"
                              + (f", pretrained on {history}" if history else "")
                              + (f", finetune {finetune}" if finetune else ""), reports))
    if split == "by-model":
        _print_wide(_source_table(reports))
    notes = {(t, why) for r in reports for t, why in r.skipped}
    for task, reason in sorted(notes):
        console.print(f"  [yellow]skipped[/yellow] {task}: {reason}")
    if as_json:
        doc = {"dataset": str(dataset), "also": [str(p) for p in also or []],
               "split": split, "finetune": finetune,
               "holdout": split_names(holdout or ""), "rows": [r.to_json() for r in reports],
               "history": str(history) if history else None, "history_twins": history_twins}
        sys.stdout.write(json.dumps(doc) + "\n")


@costmodel_app.command("train")
def train_cmd(
    dataset: list[Path] = typer.Option(..., help="dataset records files to train on; repeatable"),
    out: Path = typer.Option(..., help="the model file to write (JSON)"),
    features: str = typer.Option("itervar+hardware+roofline", help="feature set of the model"),
    seed: int = typer.Option(0),
    store: bool = typer.Option(True, help="read and keep costly feature rows in each "
                               "dataset's feature store"),
    holdout: bool = typer.Option(False, help="also score the same model on held-out networks "
                                 "(leave one model out over the zoo datasets) for the provenance"),
):
    """Fit the pretrained cost model that tune-op and tune-model start from, and write it with
    its provenance (datasets and their hashes, features, versions, held-out scores)."""
    from ..evaluation import evaluate
    from ..evaluation.pretrain import train_pretrained

    sets = [load_or_fail(p) for p in dataset]
    bank = _bank(dataset[0], store, dataset[1:])
    scores = {}
    if holdout:
        zoo = [ds for ds in sets if len({t.info.source for t in ds}) > 1]
        if not zoo:
            fail("--holdout needs a dataset of several models' tasks (e.g. data/cpu-spr-zoo*)")
        joined = zoo[0]
        for ds in zoo[1:]:
            joined = joined.join(ds)
        report = _run(evaluate, dataset=joined, model="xgb-reg", features=features,
                      split="by-model", seed=seed, bank=bank, label="absolute")
        _print_wide(_source_table([report]))
        scores = {"split": "by-model", "datasets": [str(ds.path) for ds in zoo],
                  **{k: v for k, v in report.to_json().items() if k in ("mean", "by_source")}}
    model = _run(train_pretrained, datasets=sets, features=features, bank=bank, seed=seed,
                 holdout_scores=scores, on_task=lambda name: console.print(f"  features of {name}",
                                                                          highlight=False))
    model.save(out)
    p = model.provenance
    console.print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): {p['rows']} records of "
                  f"{sum(d['tasks'] for d in p['datasets'])} tasks, {features}, label scale "
                  f"{model.label_scale:.3f} TFLOP/s")


@costmodel_app.command("train-cuda")
def train_cuda_cmd(
    timings: Path = typer.Option(..., help="GPU timings (benchmarks/bench_cuda_model.py --save)"),
    out: Path = typer.Option(..., help="the model file to write (JSON)"),
    arch: str = typer.Option("sm_90", help="the GPU architecture the timings are of"),
    seed: int = typer.Option(0),
):
    """Fit the CUDA cost model that hardware-free tuning for that GPU ranks with, over the
    hardware_cuda features, and write it with its provenance and leave-one-out scores."""
    from ..evaluation.pretrain_cuda import train_cuda

    if not timings.exists():
        fail(f"no such timings file: {timings}")
    try:
        model = train_cuda(timings, arch, seed)
    except (ValueError, KeyError, OSError) as err:
        fail(f"{timings}: {err}")
    model.save(out)
    p = model.provenance
    mean = p["holdout"].get("mean", {})
    console.print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): {p['timings']['rows']} "
                  f"timings of {p['timings']['workloads']} workloads on "
                  f"{', '.join(p['timings']['devices'])}; each workload left out: Pearson "
                  f"{mean.get('pearson')}, top-10 {mean.get('top10')}")


def register(app: typer.Typer) -> None:
    app.add_typer(costmodel_app, name="costmodel")
