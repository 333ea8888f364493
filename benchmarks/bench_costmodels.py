"""Tuning curves of cost models on held-out tasks, and their predicted vs measured performance.

Each held-out task of a dataset is tuned from scratch with each cost model at the same trial
budget: random search (the reference), XGBoost on knob features (AutoTVM's default), on
knob+itervar, on knob+itervar+hardware (when the hardware extractor exists), and GTuner
pretrained on the dataset's other tasks (transfer). Printed per task and model: the best latency
after 25%, 50% and 100% of the trials, the trials needed to reach 95% of the best known
performance (the best of the dataset and of every run; of the runs alone when the dataset was
measured on a CPU this host is not, whose held-out tasks are then tuned for this host), the
tuning time, and the Pearson
correlation of the model's predictions with the measured throughput of the configs it chose
(predicted just before each was measured, as XFEATUR's figure 1). Then one JSON line.
Pretrained models learn from the dataset's other tasks minus the held-out tasks' twins (the
same operator and shapes fused differently); on costly features, from those of them whose rows
the dataset's feature store holds (the count is printed).
Models on hardware features compile every candidate they score (about 0.3 s each), so they
are searched through a prescreen (``cost_model.Prescreened``): annealing walks on XGBoost over
``itervar`` (pretrained like the model), and the model picks each batch from the 4 x batch best
configs found; their rows say ``prescreened``.

Plots (PNG, with --out): ``tuning_curves.png`` (best GFLOP/s vs trials per task) and
``predicted_vs_measured.png`` (one scatter per task and model, coloured by trial).

    python benchmarks/bench_costmodels.py --dataset data/cpu.jsonl.gz \
        [--holdout conv2d_C7,conv2d_C12] [--trials 200] [--search sa|ga] [--repeats 1] \
        [--models random,xgb:knob,xgb:knob+itervar,gtuner:itervar:pretrained] [--out DIR]

Tuning is CPU-bound and timed: run it on an otherwise idle machine. ``--quick`` shrinks the
search and the measurements to check the script, not to produce numbers.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tensortune.cost_model.metrics import pearson
from tensortune.dataset import Dataset, TaskData, features_path, load_dataset, shape_key
from tensortune.evaluation import FeatureBank
from tensortune.features import EXTRACTORS, make_extractor
from tensortune.features.store import FeatureStore
from tensortune.settings import MeasureSettings, SearchSettings, Settings
from tensortune.tuner import MODEL_TUNERS, fresh_model, tune_task
from tensortune.workload import Task, default_target, missing_host_features

REACH = 0.95  # "reached": within this fraction of the best known throughput
# extractors that compile every candidate: a full annealing run scores thousands per batch
COSTLY_FEATURES = ("hardware", "roofline")  # roofline derives from hardware rows
PRESCREEN = "itervar"  # what the search walks on for models over costly features


@dataclass(frozen=True)
class CurveSpec:
    """One contestant: ``tuner[:features[:pretrained]]``, e.g. ``gtuner:itervar:pretrained``."""

    tuner: str
    features: str = "knob"
    pretrained: bool = False

    @property
    def costly(self) -> bool:
        return any(f in self.features.split("+") for f in COSTLY_FEATURES)

    @property
    def label(self) -> str:
        if self.tuner == "random":
            return "random"
        return f"{self.tuner}:{self.features}" + (":pretrained" if self.pretrained else "")

    @staticmethod
    def parse(text: str) -> "CurveSpec":
        parts = text.split(":")
        if parts[0] == "random" and len(parts) == 1:
            return CurveSpec("random")
        if parts[0] not in MODEL_TUNERS or len(parts) > 3 or (
                len(parts) == 3 and parts[2] != "pretrained"):
            raise ValueError(f"bad model spec {text!r}: use random, xgb:FEATURES, gtuner:FEATURES "
                             "or ensemble:FEATURES, optionally ending in :pretrained")
        make_extractor(parts[1] if len(parts) > 1 else "knob")  # names unknown features
        return CurveSpec(parts[0], parts[1] if len(parts) > 1 else "knob", len(parts) == 3)


def default_specs() -> list[str]:
    specs = ["random", "xgb:knob", "xgb:knob+itervar"]
    if "hardware" in EXTRACTORS:
        specs.append("xgb:knob+itervar+hardware")
    specs += ["xgb:itervar:pretrained", "gtuner:itervar:pretrained"]
    if "hardware" in EXTRACTORS:
        specs.append("gtuner:itervar+hardware:pretrained")
    return specs


def make_model(spec: CurveSpec, history: list[TaskData], seed: int, bank: FeatureBank):
    """A fresh cost model for ``spec``, pretrained on ``history`` when the spec says so.
    ``bank`` serves the history's costly feature rows from the dataset's feature store."""
    from tensortune.cost_model import Prescreened

    if spec.tuner == "random":
        return None
    model = fresh_model(spec.tuner, bank.get(spec.features), seed)
    if spec.pretrained:
        # computing costly rows for thousands of history records would dwarf the run itself
        own = [d for d in history if bank.stored(spec.features, d)]
        model.pretrain([i for d in own for i in d.inputs], [r for d in own for r in d.results])
    if not spec.costly:
        return model
    cheap = fresh_model("xgb", bank.get(PRESCREEN), seed)
    if spec.pretrained:
        cheap.pretrain([i for d in history for i in d.inputs],
                       [r for d in history for r in d.results])
    return Prescreened(cheap, model)


def best_so_far(curve: list[tuple[int, float]], trials: int) -> np.ndarray:
    """Best cost after each trial 1..``trials`` (inf before the first success)."""
    out = np.full(trials, np.inf)
    for trial, cost in curve:
        if 1 <= trial <= trials:
            out[trial - 1:] = np.minimum(out[trial - 1:], cost)
    return out


def trials_to_reach(best: np.ndarray, target_cost: float) -> int | None:
    """The first trial whose best cost is within ``REACH`` of ``target_cost``."""
    hit = np.flatnonzero(target_cost / best >= REACH)
    return int(hit[0]) + 1 if hit.size else None


def tune_runs(data: TaskData, task: Task, spec: CurveSpec, history: list[TaskData], args,
              settings: Settings, workdir: Path, bank: FeatureBank) -> list[dict]:
    """``args.repeats`` tuning runs of ``task`` (``data``'s, maybe retargeted) with one model."""
    runs = []
    for r in range(args.repeats):
        seed = args.seed + r
        model = make_model(spec, history, seed, bank)
        log = workdir / f"{data.name}-{spec.label.replace(':', '_')}-{r}.jsonl"
        log.unlink(missing_ok=True)
        points = []  # (trial, predicted score, measured cost) as XFEATUR's figure 1

        def predict_measured(inp, res, model=model, points=points):
            if model is not None and res.ok and getattr(model, "trained", False):
                points.append((len(points), float(model.predict([inp])[0]), res.cost))

        res = tune_task(task, args.trials, tuner=spec.tuner, log=log,
                        settings=dataclasses.replace(settings, seed=seed), resume=False,
                        features=spec.features, search=args.search, model=model,
                        callbacks=[predict_measured])
        runs.append({"best": best_so_far(res.curve, args.trials), "tune_s": res.tune_s,
                     "points": points, "trials": res.trials})
        print(f"  {data.name} {spec.label} run {r}: best {res.best_cost * 1e6:.1f} us after "
              f"{res.trials} trials, {res.tune_s:.0f} s", flush=True)
    return runs


def summarize(data: TaskData, spec: CurveSpec, runs: list[dict], best_known: float,
              trials: int) -> dict:
    mean_best = np.exp(np.mean([np.log(r["best"]) for r in runs], axis=0))  # geometric mean
    reached = [trials_to_reach(r["best"], best_known) for r in runs]
    points = [p for r in runs for p in r["points"]]
    r_value = (pearson([p[1] for p in points], [1.0 / p[2] for p in points])
               if len(points) >= 3 else None)
    at = {f"best_us_at_{q}": _us(mean_best[max(0, math.ceil(trials * q / 100) - 1)])
          for q in (25, 50, 100)}
    return {"model": spec.label, "prescreened": spec.costly, **at,
            "gflops": (round(data.flops / mean_best[-1] / 1e9, 2)
                       if np.isfinite(mean_best[-1]) else 0.0),
            "trials_to_95": _median_or_none(reached),
            "reached_runs": sum(x is not None for x in reached),
            "tune_s": round(float(np.mean([r["tune_s"] for r in runs])), 1),
            "pearson": None if r_value is None else round(r_value, 3),
            "curve_us": [_us(c) for c in mean_best]}


def _us(cost: float) -> float | None:
    return round(float(cost) * 1e6, 2) if np.isfinite(cost) else None


def _median_or_none(values):
    got = [v for v in values if v is not None]
    return int(np.median(got)) if len(got) == len(values) and got else None


def plot(out: Path, tasks: list[TaskData], results: dict, best_known: dict,
         trials: int) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.5), squeeze=False)
    for ax, data in zip(axes[0], tasks):
        for label, (row, _) in results[data.name].items():
            gflops = [data.flops / (c * 1e-6) / 1e9 if c else np.nan for c in row["curve_us"]]
            ax.plot(np.arange(1, trials + 1), gflops, label=label)
        ax.axhline(REACH * data.flops / best_known[data.name] / 1e9, ls="--", c="grey",
                   label=f"{int(REACH * 100)}% of best known")
        ax.set(title=data.name, xlabel="trials", ylabel="best GFLOP/s")
        ax.legend(fontsize=8)
    fig.tight_layout()
    curves = out / "tuning_curves.png"
    fig.savefig(curves, dpi=110)
    plt.close(fig)

    labels = [lb for lb in next(iter(results.values())) if lb != "random"]
    fig, axes = plt.subplots(len(tasks), max(1, len(labels)),
                             figsize=(4.2 * max(1, len(labels)), 3.8 * len(tasks)), squeeze=False)
    for row_axes, data in zip(axes, tasks):
        for ax, label in zip(row_axes, labels):
            row, runs = results[data.name][label]
            pts = [p for r in runs for p in r["points"]]
            if pts:
                sc = ax.scatter([p[1] for p in pts], [data.flops / p[2] / 1e9 for p in pts],
                                c=[p[0] for p in pts], cmap="viridis", s=10)
                fig.colorbar(sc, ax=ax, label="measurement")
            r_text = "n/a" if row["pearson"] is None else f"{row['pearson']:.2f}"
            ax.set(title=f"{data.name}\n{label}: r = {r_text}", xlabel="predicted score",
                   ylabel="measured GFLOP/s")
    fig.tight_layout()
    scatter = out / "predicted_vs_measured.png"
    fig.savefig(scatter, dpi=110)
    plt.close(fig)
    return [curves, scatter]


def quick_settings(settings: Settings) -> Settings:
    return dataclasses.replace(
        settings,
        measure=MeasureSettings(threads=settings.measure.threads, number=1, repeat=2,
                                min_repeat_ms=5, run_timeout_s=10),
        search=SearchSettings(batch_size=8, sa_chains=8, sa_steps=10, sa_restarts=0,
                              ga_population=16, ga_generations=3, ga_elite=4))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="data/cpu.jsonl.gz")
    ap.add_argument("--holdout", default="conv2d_C7,conv2d_C12",
                    help="comma-separated task names (or sources) of the dataset to tune")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--models", default=",".join(default_specs()))
    ap.add_argument("--search", default="sa", choices=("sa", "ga"))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="directory for the PNG plots (default: none)")
    ap.add_argument("--workdir", default=None, help="keep the runs' logs here (default: temp)")
    ap.add_argument("--quick", action="store_true", help="tiny search and timing: a smoke test")
    args = ap.parse_args(argv)
    if args.trials < 1 or args.repeats < 1:
        ap.error("--trials and --repeats must be at least 1")
    try:
        specs = [CurveSpec.parse(s.strip()) for s in args.models.split(",") if s.strip()]
    except ValueError as err:
        ap.error(str(err))
    if not Path(args.dataset).exists():
        ap.error(f"no such dataset: {args.dataset} (collect one with `tensortune dataset collect`)")
    dataset: Dataset = load_dataset(args.dataset)
    try:
        held = dataset.select([h.strip() for h in args.holdout.split(",") if h.strip()])
    except KeyError as err:
        ap.error(str(err.args[0]))
    # twins (the same operator and shapes fused differently) would make transfer look easy
    held_shapes = {shape_key(d.task.workload) for d in held}
    history = [d for d in dataset
               if d.name not in held.names and shape_key(d.task.workload) not in held_shapes]
    settings = Settings.from_env()
    settings = quick_settings(settings) if args.quick else settings
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tt-costmodels-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if any(s.costly for s in specs):
        print(f"note: models on {', '.join(COSTLY_FEATURES)} features compile each candidate they "
              f"score: the search walks on XGBoost over {PRESCREEN} and they pick each batch from "
              "its shortlist", flush=True)
    print(f"{len(held)} held-out task(s), {len(history)} history task(s) "
          f"({sum(d.n for d in history)} records); {args.trials} trials, search {args.search}; "
          f"logs in {workdir}", flush=True)

    # the dataset's stored rows only: the held-out runs' new candidates are not written back
    bank = FeatureBank(FeatureStore(features_path(args.dataset), read_only=True))
    for features in sorted({s.features for s in specs if s.pretrained and s.costly}):
        print(f"pretraining on {features}: {sum(bank.stored(features, d) for d in history)} of "
              f"{len(history)} history tasks have stored rows", flush=True)
    # a dataset measured on another CPU (say AVX-512 records on an AVX2 host): tune its held-out
    # tasks for this host instead, and judge them by this run's measurements alone
    tasks, foreign = {}, set()
    for data in held:
        missing = missing_host_features(data.task.target)
        tasks[data.name] = data.task
        if missing:
            host = default_target(data.task.target.get("num-cores"))
            tasks[data.name] = Task(data.task.workload, host, data.task.template)
            foreign.add(data.name)
            print(f"note: {data.name} was measured for mcpu {data.task.target.get('mcpu')} "
                  f"({', '.join(missing)}, which this host lacks): tuned for mcpu "
                  f"{host['mcpu']} here; best known = the best of this run only", flush=True)
    raw: dict[str, dict] = {}
    for data in held:
        raw[data.name] = {s.label: (s, tune_runs(data, tasks[data.name], s, history, args,
                                                 settings, workdir, bank)) for s in specs}
    best_known = {}
    for data in held:
        run_best = min(float(r["best"][-1]) for _, runs in raw[data.name].values() for r in runs)
        best_known[data.name] = run_best if data.name in foreign else min(data.best_cost, run_best)
    results = {d.name: {label: (summarize(d, s, runs, best_known[d.name], args.trials), runs)
                        for label, (s, runs) in raw[d.name].items()} for d in held}

    header = (f"{'task':<22} {'model':<34} {'@25% us':>9} {'@50% us':>9} {'best us':>9} "
              f"{'GFLOP/s':>8} {'to 95%':>7} {'tune s':>7} {'pearson':>8}")
    print(header)
    for data in held:
        for row, _ in results[data.name].values():
            print(f"{data.name[:22]:<22} {row['model'][:34]:<34} {_fmt(row['best_us_at_25']):>9} "
                  f"{_fmt(row['best_us_at_50']):>9} {_fmt(row['best_us_at_100']):>9} "
                  f"{row['gflops']:>8.1f} {_fmt(row['trials_to_95']):>7} {row['tune_s']:>7.0f} "
                  f"{'-' if row['pearson'] is None else format(row['pearson'], '.2f'):>8}")
        print(f"{'':<22} best known {best_known[data.name] * 1e6:.1f} us "
              f"({data.flops / best_known[data.name] / 1e9:.1f} GFLOP/s)")
    plots = plot(Path(args.out), list(held), results, best_known, args.trials) if args.out else []
    for p in plots:
        print(f"wrote {p}")
    summary = {"dataset": args.dataset, "trials": args.trials, "search": args.search,
               "repeats": args.repeats, "plots": [str(p) for p in plots],
               "tasks": {d.name: {"best_known_us": _us(best_known[d.name]),
                                  "mcpu": tasks[d.name].target.get("mcpu"),
                                  "runs": [row for row, _ in results[d.name].values()]}
                         for d in held}}
    sys.stdout.write(json.dumps(summary) + "\n")
    return 0


def _fmt(v) -> str:
    return "-" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))


if __name__ == "__main__":
    sys.exit(main())
