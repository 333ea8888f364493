"""How well the CUDA cost models rank kernels that a real GPU timed.

Reads timed batches (``tensortune measure export`` directories holding the device runner's
``results.jsonl``): each candidate's ``hardware_cuda`` row (nvcc's PTX and ptxas report, saved
at build time) and its measured time. Per workload, over its verified candidates:

- ``analytic``: Tuna's static model (``cost_model.gpu_analytic``), nothing learned;
- ``xgb hardware_cuda, other ops``: XGBoost on the hardware rows, trained on the other
  workloads' timings only (an unseen operator, as a new network's layers are);
- ``xgb itervar, other ops``: the same on the loop features the tuner searches with;
- ``xgb hardware_cuda, first batches``: trained on this workload's earlier batches, scored on its
  last one (what the tuner's model knows when it proposes).

Metrics as for the CPU: Pearson of predicted vs measured throughput, and Tuna's top-10 ratio
(summed time of the 10 truly fastest over that of the model's 10 picks; 1.0 is perfect).

    python benchmarks/bench_cuda_model.py BATCH_DIR [BATCH_DIR ...] [--save TIMINGS.jsonl.gz]
    python benchmarks/bench_cuda_model.py --timings benchmarks/cuda/timings-h100.jsonl.gz

``--save`` keeps what the metrics need (workload, config, feature row, times, batch number)
in one compressed file, without the batches' cubins and data.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tensortune.cost_model.gpu_analytic import predicted_seconds  # noqa: E402
from tensortune.cost_model.metrics import pearson, topk_ratio  # noqa: E402
from tensortune.measure.cuda_export import read_manifest  # noqa: E402


def load(batch_dirs: list[str]) -> dict[str, list[dict]]:
    """Per workload, the verified candidates: config, hardware row, seconds, batch number."""
    out: dict[str, list[dict]] = defaultdict(list)
    seen = set()
    for number, d in enumerate(batch_dirs):
        manifest = read_manifest(d)
        lines = {}
        for text in (Path(d) / "results.jsonl").read_text().splitlines():
            line = json.loads(text)
            lines[line["index"]] = line
        for cand in manifest["candidates"]:
            line = lines.get(cand["index"])
            if not line or line["error"] != "none" or not line["costs"]:
                continue
            rec = cand["record"]
            key = (json.dumps(rec["task"]["workload"], sort_keys=True),
                   json.dumps(rec["config"], sort_keys=True))
            if key in seen:  # a config timed again (the best of a round) counts once
                continue
            seen.add(key)
            name = manifest["data"][cand["data"]]["describe"]
            out[name].append({"task": rec["task"], "config": rec["config"],
                              "row": np.asarray(rec["features"]["hardware_cuda"], dtype=float),
                              "seconds": statistics.median(line["costs"]),
                              "costs": line["costs"], "device": line.get("device", ""),
                              "batch": number})
    return out


def save(data: dict[str, list[dict]], path: Path) -> None:
    with gzip.open(path, "wt") as f:
        for name, items in data.items():
            for it in items:
                f.write(json.dumps({"describe": name, **it, "row": it["row"].tolist()}) + "\n")


def load_saved(path: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    with gzip.open(path, "rt") as f:
        for text in f:
            it = json.loads(text)
            name = it.pop("describe")
            it["row"] = np.asarray(it["row"], dtype=float)
            out[name].append(it)
    return out


def score(pred_throughput, seconds) -> dict:
    seconds = np.asarray(seconds)
    k = min(10, len(seconds))
    return {"pearson": pearson(pred_throughput, 1.0 / seconds),
            "top10": topk_ratio(np.asarray(pred_throughput), seconds, k), "n": len(seconds)}


def itervar_rows(items: list[dict]) -> np.ndarray:
    from tensortune.features import make_extractor
    from tensortune.measure import MeasureInput
    from tensortune.space import Config
    from tensortune.workload import Task, workload_from_dict

    ex = make_extractor("itervar")
    inputs = []
    for it in items:
        t = it["task"]
        task = Task(workload_from_dict(t["workload"]), t["target"], t["template"])
        inputs.append(MeasureInput(task, Config.from_json(it["config"])))
    return np.asarray(ex.extract(inputs), dtype=float)


def xgb_scores(train_x, train_y, test_x, seed: int = 0) -> np.ndarray:
    import xgboost as xgb

    params = {"max_depth": 6, "eta": 0.1, "subsample": 0.9, "seed": seed,
              "objective": "reg:squarederror"}
    booster = xgb.train(params, xgb.DMatrix(train_x, label=train_y), num_boost_round=300)
    return booster.predict(xgb.DMatrix(test_x))


def normalized(seconds: np.ndarray) -> np.ndarray:
    """Throughput relative to the task's best (the label the CPU models learn too)."""
    return seconds.min() / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("batches", nargs="*")
    ap.add_argument("--timings", type=Path, default=None, help="a file --save wrote")
    ap.add_argument("--save", type=Path, default=None)
    ap.add_argument("--no-itervar", action="store_true",
                    help="skip the itervar comparison (its rows take about 70 ms each)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if bool(args.batches) == bool(args.timings):
        ap.error("give batch directories or --timings FILE")
    data = load_saved(args.timings) if args.timings else load(args.batches)
    if args.save:
        save(data, args.save)
    names = sorted(data)
    rows = {n: np.stack([it["row"] for it in data[n]]) for n in names}
    secs = {n: np.asarray([it["seconds"] for it in data[n]]) for n in names}
    iv = {} if args.no_itervar else {n: itervar_rows(data[n]) for n in names}
    table = []
    for n in names:
        items = data[n]
        analytic = np.asarray([1.0 / s if math.isfinite(s := predicted_seconds(r)) else 0.0
                               for r in rows[n]])
        others = [m for m in names if m != n]
        entry = {"workload": n, "n": len(items), "analytic": score(analytic, secs[n])}
        if others:
            for feats, label in ((rows, "xgb hardware_cuda, other ops"),
                                 (iv, "xgb itervar, other ops")):
                if not feats:
                    continue
                tx = np.concatenate([feats[m] for m in others])
                ty = np.concatenate([normalized(secs[m]) for m in others])
                entry[label] = score(xgb_scores(tx, ty, feats[n]), secs[n])
        last = max(it["batch"] for it in items)
        early = np.asarray([it["batch"] < last for it in items])
        if early.sum() >= 20 and (~early).sum() >= 10:
            pred = xgb_scores(rows[n][early], normalized(secs[n][early]), rows[n][~early])
            entry["xgb hardware_cuda, first batches"] = score(pred, secs[n][~early])
        table.append(entry)
    labels = ["analytic", "xgb hardware_cuda, other ops", "xgb itervar, other ops",
              "xgb hardware_cuda, first batches"]
    print("| workload | candidates | " + " | ".join(f"{lab}: Pearson / top-10" for lab in labels)
          + " |")
    print("|" + " --- |" * (2 + len(labels)))
    for e in table:
        cells = [f"{e[lab]['pearson']:.3f} / {e[lab]['top10']:.3f}" if lab in e else "-"
                 for lab in labels]
        print(f"| {e['workload']} | {e['n']} | " + " | ".join(cells) + " |")
    means = {lab: (statistics.mean(e[lab]["pearson"] for e in table if lab in e),
                   statistics.mean(e[lab]["top10"] for e in table if lab in e))
             for lab in labels if any(lab in e for e in table)}
    print("| mean | | " + " | ".join(f"{means[lab][0]:.3f} / {means[lab][1]:.3f}"
                                     if lab in means else "-" for lab in labels) + " |")
    if args.json:
        args.json.write_text(json.dumps({"rows": table, "means": means}, indent=1))


if __name__ == "__main__":
    main()
