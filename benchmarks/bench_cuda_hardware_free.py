"""Hardware-free CUDA picks, timed on a real GPU: the analytical model against the learned one.

For workloads no CUDA model was trained on, ``export`` ranks configs without a GPU (the
hardware-free search, ``tuner.static.predict_best``) with Tuna's analytical model and with the
shipped model learned from H100 timings, builds each one's top picks and ``--random`` valid
random configs (the distribution a pick is judged against) into one batch, and notes which
candidate is which (``roles.json``). ``python -m tensortune.device_runner BATCH`` times it on
the GPU; ``report`` says, per workload, how fast each model's first pick and best of its top
``--top`` ran, and where they stand among the random configs.

    python benchmarks/bench_cuda_hardware_free.py export --out BATCH [--random 40] [--top 3]
    python benchmarks/bench_cuda_hardware_free.py report BATCH [--json OUT]
    python benchmarks/bench_cuda_hardware_free.py export-model resnet18 --out BATCH --home DIR
    python benchmarks/bench_cuda_hardware_free.py report-model BATCH

``export-model`` runs a zoo model's hardware-free CUDA tuning and exports each task's pick with
its predicted time; ``report-model`` sets those predictions beside the GPU's times.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# none of these shapes is in the timings the learned model saw; two have irregular channels
WORKLOADS = [
    {"op": "conv2d", "n": 1, "c": 64, "h": 56, "w": 56, "filters": 64, "kh": 3, "kw": 3,
     "stride": 1, "padding": 1},
    {"op": "conv2d", "n": 1, "c": 64, "h": 56, "w": 56, "filters": 128, "kh": 1, "kw": 1,
     "stride": 2, "padding": 0},
    {"op": "conv2d", "n": 1, "c": 24, "h": 37, "w": 37, "filters": 72, "kh": 3, "kw": 3,
     "stride": 1, "padding": 1},
    {"op": "dense", "batch": 120, "in_features": 1000, "out_features": 200},
]


def export(args) -> None:
    from tensortune.cost_model.gpu_analytic import AnalyticGPUModel
    from tensortune.cost_model.pretrained import PretrainedModel
    from tensortune.features.hardware_cuda import HardwareCUDAFeatures
    from tensortune.measure import LocalBuilder, MeasureInput
    from tensortune.measure.cuda_export import write_batch
    from tensortune.settings import Settings
    from tensortune.space import task_space
    from tensortune.tuner.static import predict_best, shipped_model
    from tensortune.workload import Task, workload_from_dict

    settings = Settings()
    features = HardwareCUDAFeatures(arch="sm_90")  # one cache: both models score the same rows
    models = {"analytic": AnalyticGPUModel(features),
              "learned": PretrainedModel.load(args.model, extractor=features)}
    target = {"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}}
    roles: dict[str, list] = {}
    items = []
    with LocalBuilder(2, 60) as builder:
        for spec in WORKLOADS:
            task = Task(workload_from_dict(spec), target, "cuda.generic")
            wanted: dict = {}
            for name, model in models.items():
                with shipped_model(settings, model) as m:
                    res = predict_best(task, m, settings, seed=args.seed)
                print(f"{task.workload.describe()}: {name} compiled {res.compiled}, predicted "
                      f"{(res.predicted_seconds or 0) * 1e6:.1f} us", flush=True)
                for rank, (config, _) in enumerate(res.ranked[:args.top]):
                    wanted.setdefault(config, []).append(f"{name}#{rank + 1}")
            rng = np.random.default_rng(args.seed)
            pool = task_space(task).sample_many(args.random * 6, rng, set(wanted))
            inputs = [MeasureInput(task, c) for c in [*wanted, *pool]]
            builds = builder.build(inputs)
            n_random = 0
            for inp, build in zip(inputs, builds):
                if build.error.value != "none":
                    continue
                labels = wanted.get(inp.config)
                if labels is None:
                    if n_random >= args.random:
                        continue
                    n_random += 1
                    labels = ["random"]
                roles[str(len(items))] = labels
                items.append((inp, build))
        write_batch(args.out, items, seed=args.seed)
    (Path(args.out) / "roles.json").write_text(json.dumps(roles))
    print(f"{len(items)} candidates in {args.out}")


def export_model(args) -> None:
    """A zoo model's hardware-free CUDA run (``Session.tune_hardware_free``, the shipped model
    for sm_90): each task's first pick built into one batch, with its predicted time and
    weight (``roles.json``), to check the per-task predictions against the GPU."""
    from tensortune.measure import LocalBuilder, MeasureInput
    from tensortune.measure.cuda_export import write_batch
    from tensortune.session import Session
    from tensortune.settings import Settings
    from tensortune.workload import parse_target

    settings = Settings(target=parse_target("cuda:sm_90"), home=Path(args.home))
    session = Session.from_zoo(args.model_name, settings=settings)
    summary = session.tune_hardware_free()
    print(f"{args.model_name}: {summary}", flush=True)
    tasks = [t for t in session.extract() if t.tunable and t.key in session.static
             and session.static[t.key].best is not None]
    inputs = [MeasureInput(t.task, session.static[t.key].best) for t in tasks]
    roles: dict[str, list] = {}
    items = []
    with LocalBuilder(2, 120) as builder:
        for t, inp, build in zip(tasks, inputs, builder.build(inputs)):
            if build.error.value != "none":
                print(f"{t.task.workload.describe()[:60]}: {build.error.value} {build.message}")
                continue
            roles[str(len(items))] = [{"task": t.key, "weight": t.weight,
                                       "predicted_us": session.static[t.key].predicted_seconds
                                       * 1e6}]
            items.append((inp, build))
        write_batch(args.out, items, seed=0)
    (Path(args.out) / "roles.json").write_text(json.dumps(roles))
    print(f"{len(items)} task picks in {args.out}")


def report_model(args) -> None:
    from tensortune.cost_model.metrics import pearson, spearman

    roles = json.loads((Path(args.batch) / "roles.json").read_text())
    manifest = json.loads((Path(args.batch) / "manifest.json").read_text())
    names = {c["index"]: manifest["data"][c["data"]]["describe"] for c in manifest["candidates"]}
    rows = []
    for text in (Path(args.batch) / "results.jsonl").read_text().splitlines():
        line = json.loads(text)
        role = roles[str(line["index"])][0]
        measured = statistics.median(line["costs"]) * 1e6 if line["error"] == "none" else None
        rows.append({**role, "measured_us": measured, "error": line["error"],
                     "workload": names[line["index"]]})
    ok = [r for r in rows if r["measured_us"]]
    pred, meas = [r["predicted_us"] for r in ok], [r["measured_us"] for r in ok]
    print("| task | calls | predicted us | measured us | measured / predicted |")
    print("| --- | --- | --- | --- | --- |")
    for r in sorted(rows, key=lambda r: -(r["measured_us"] or 0) * r["weight"]):
        m = f"{r['measured_us']:.1f}" if r["measured_us"] else r["error"]
        ratio = f"{r['measured_us'] / r['predicted_us']:.2f}" if r["measured_us"] else "-"
        print(f"| {r['workload'][:70]} | {r['weight']} | {r['predicted_us']:.1f} | {m} | {ratio} |")
    total_p = sum(r["weight"] * r["predicted_us"] for r in ok) / 1e3
    total_m = sum(r["weight"] * r["measured_us"] for r in ok) / 1e3
    print(f"tasks {len(rows)}, ran {len(ok)}; over the tasks: Pearson of predicted vs measured time "
          f"{pearson(pred, meas):.3f}, Spearman {spearman(pred, meas):.3f}; weighted total "
          f"predicted {total_p:.3f} ms, measured {total_m:.3f} ms")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def report(args) -> None:
    manifest = json.loads((Path(args.batch) / "manifest.json").read_text())
    roles = json.loads((Path(args.batch) / "roles.json").read_text())
    times = {}
    for text in (Path(args.batch) / "results.jsonl").read_text().splitlines():
        line = json.loads(text)
        if line["error"] == "none":
            times[line["index"]] = statistics.median(line["costs"]) * 1e6
    by_data: dict = {}
    for cand in manifest["candidates"]:
        by_data.setdefault(cand["data"], []).append(cand["index"])
    rows = []
    for data, indices in by_data.items():
        random_us = sorted(times[i] for i in indices if "random" in roles[str(i)] and i in times)
        row = {"workload": manifest["data"][data]["describe"], "random_n": len(random_us),
               "random_best_us": random_us[0] if random_us else None,
               "random_median_us": statistics.median(random_us) if random_us else None}
        for model in ("analytic", "learned"):
            mine = {lab: times.get(i) for i in indices for lab in roles[str(i)]
                    if lab.startswith(model)}
            first = mine.get(f"{model}#1")
            timed = [t for t in mine.values() if t is not None]
            row[f"{model}_first_us"] = first
            row[f"{model}_best_us"] = min(timed) if timed else None
            # share of the random configs that the first pick beats
            row[f"{model}_beats_random"] = (sum(first < r for r in random_us) / len(random_us)
                                            if first is not None and random_us else None)
        rows.append(row)
    print("| workload | analytic pick us (beats random) | learned pick us (beats random) | "
          "analytic best of top-3 | learned best of top-3 | random best / median us |")
    print("| --- | --- | --- | --- | --- | --- |")
    fmt = lambda v: f"{v:.1f}" if v is not None else "-"  # noqa: E731
    pct = lambda v: f"{100 * v:.0f}%" if v is not None else "-"  # noqa: E731
    for r in rows:
        print(f"| {r['workload']} | {fmt(r['analytic_first_us'])} ({pct(r['analytic_beats_random'])}) "
              f"| {fmt(r['learned_first_us'])} ({pct(r['learned_beats_random'])}) | "
              f"{fmt(r['analytic_best_us'])} | {fmt(r['learned_best_us'])} | "
              f"{fmt(r['random_best_us'])} / {fmt(r['random_median_us'])} (of {r['random_n']}) |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export")
    ex.add_argument("--out", required=True)
    ex.add_argument("--model", default=str(Path(__file__).resolve().parent.parent / "tensortune"
                                           / "cost_model" / "shipped" / "cuda-sm90.json"))
    ex.add_argument("--random", type=int, default=40)
    ex.add_argument("--top", type=int, default=3)
    ex.add_argument("--seed", type=int, default=0)
    rep = sub.add_parser("report")
    rep.add_argument("batch")
    rep.add_argument("--json", type=Path, default=None)
    exm = sub.add_parser("export-model")
    exm.add_argument("model_name")
    exm.add_argument("--out", required=True)
    exm.add_argument("--home", required=True, help="a fresh tensortune home for the run")
    repm = sub.add_parser("report-model")
    repm.add_argument("batch")
    repm.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    {"export": export, "report": report, "export-model": export_model,
     "report-model": report_model}[args.cmd](args)


if __name__ == "__main__":
    main()
