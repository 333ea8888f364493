"""Hardware-free tuning against measured tuning, on whole models.

For each model, in this one process: tune it with measurements (``--trials`` with a fresh
XGBoost per task, AutoTVM's way) or reuse such a run (``--tuned-home``); with
``--pretrained-trials N`` tune it again from the shipped cost model with N trials; then tune it
``--hardware-free`` (no candidate timed) and, with ``--verify-top K``, hardware-free with the K
best predicted configs of each task timed. Every row has its own home (no records shared).
Build each, time all of them in interleaved rounds (numpy in, numpy out), and print a table of
latency, tuning time (the search, without the model's final build, which every row does alike
and which has its own column), and candidates compiled and timed, and one JSON line.

    python benchmarks/bench_hardware_free.py [--models resnet18,mobilenet_v2] [--trials 800]
        [--pretrained-trials 200] [--tuned-home DIR] [--verify-top 2] [--fast] [--home DIR]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tensortune.measure import use_threads
from tensortune.peers.models import time_interleaved
from tensortune.session import Session
from tensortune.settings import Settings


def measured(name: str, settings: Settings, trials: int,
             cost_model: str = "fresh") -> tuple[Session, dict]:
    s = Session.from_zoo(name, settings=settings)
    start = time.perf_counter()
    result = s.tune(trials, cost_model=cost_model)
    tuned = time.perf_counter()
    s.build()
    return s, {"tune_s": tuned - start, "build_s": time.perf_counter() - tuned,
               "compiled": result.trials, "timed": result.trials}


def hardware_free(name: str, settings: Settings, verify_top: int,
                  effort: str = "full") -> tuple[Session, dict]:
    s = Session.from_zoo(name, settings=settings)
    start = time.perf_counter()
    counts = s.tune_hardware_free(verify_top=verify_top, effort=effort)
    tuned = time.perf_counter()
    s.build()
    return s, {"tune_s": tuned - start, "build_s": time.perf_counter() - tuned,
               "compiled": counts["compiled"], "timed": counts["timed"],
               "predicted_ms": counts["predicted_ms"]}


def bench_one(name: str, args, home: Path) -> dict:
    base = Settings.from_env()
    rows = {}
    if args.tuned_home:  # a measured run of this model already tuned there: rebuild it
        s = Session.from_zoo(name, settings=dataclasses.replace(base, home=Path(args.tuned_home)))
        s.build()
        runs = [json.loads(p.read_text()) for p in
                sorted(Path(args.tuned_home, "runs").glob(f"*-{name}-*/run.json"))]
        info = runs[-1] if runs else {}
        trials = info.get("trials", 0)
        # the run's extraction counts, as it does in every other row (tune_s is their wall time)
        stages = info.get("stages", {})
        tune_s = stages["tune"] + stages.get("extract", 0.0) if "tune" in stages else None
        rows[f"measured, {trials} trials"] = (s, {"tune_s": tune_s,
                                                   "compiled": trials, "timed": trials})
    else:
        settings = dataclasses.replace(base, home=home / f"measured-{name}")
        rows[f"measured, {args.trials} trials"] = measured(name, settings, args.trials)
    if args.pretrained_trials:
        rows[f"pretrained, {args.pretrained_trials} trials"] = measured(
            name, dataclasses.replace(base, home=home / f"pretrained-{name}"),
            args.pretrained_trials, cost_model="pretrained")
    print(f"[{name}] tuned: " + ", ".join(f"{k} {v[1]['tune_s']:.0f} s" for k, v in rows.items()
                                          if v[1]["tune_s"] is not None), flush=True)
    if not args.no_hardware_free:
        rows["hardware-free"] = hardware_free(name, dataclasses.replace(
            base, home=home / f"free-{name}"), 0)
    if args.fast:
        rows["hardware-free, fast"] = hardware_free(name, dataclasses.replace(
            base, home=home / f"fast-{name}"), 0, effort="fast")
    if args.verify_top:
        rows[f"hardware-free, top {args.verify_top} timed"] = hardware_free(
            name, dataclasses.replace(base, home=home / f"verify-{name}"), args.verify_top)
    first = next(iter(rows.values()))[0]
    x = first.model.random_inputs(seed=0)
    times = time_interleaved({k: (lambda s=s: s.run(*x)) for k, (s, _) in rows.items()},
                             rounds=args.rounds, per_round=args.per_round)
    out = {"model": name, "rows": {}}
    reference = None
    for label, (s, info) in rows.items():
        ms = float(np.median(times[label])) * 1e3
        reference = reference or ms
        out["rows"][label] = {**info, "ms": ms, "vs_measured": ms / reference}
    return out


def table_rows(result: dict) -> list[str]:
    rows, first = [], next(iter(result["rows"].values()))
    for label, row in result["rows"].items():
        tune = "-" if row["tune_s"] is None else f"{row['tune_s']:.0f}"
        share = ("-" if not (row["tune_s"] and first["tune_s"])
                 else f"{row['tune_s'] / first['tune_s']:.1%}")
        build = f"{row['build_s']:.0f}" if row.get("build_s") is not None else "-"
        rows.append(f"| {result['model']} | {label} | {row['ms']:.2f} | {row['vs_measured']:.2f}"
                    f" | {tune} | {share} | {build} | {row['compiled']} | {row['timed']} |")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--trials", type=int, default=800)
    ap.add_argument("--pretrained-trials", type=int, default=0,
                    help="also tune from the shipped cost model with this many trials")
    ap.add_argument("--tuned-home", default=None,
                    help="reuse the measured runs under this home instead of tuning again")
    ap.add_argument("--verify-top", type=int, default=2)
    ap.add_argument("--no-hardware-free", action="store_true",
                    help="leave out the hardware-free row (with --verify-top 0)")
    ap.add_argument("--fast", action="store_true",
                    help="also hardware-free with effort fast (no search: seeds ranked, the "
                    "best of a few register tiles compiled)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-round", type=int, default=10)
    ap.add_argument("--home", default=None)
    args = ap.parse_args(argv)
    home = Path(args.home or tempfile.mkdtemp(prefix="tt-bench-free-"))
    use_threads(Settings.from_env().measure.threads)
    header = ("| model | tuning | latency ms | vs measured | tune s | time vs measured | "
              "build s | compiled | timed |\n|---|---|---|---|---|---|---|---|---|")
    results = []
    for m in (m.strip() for m in args.models.split(",") if m.strip()):
        results.append(bench_one(m, args, home))
        print(header + "\n" + "\n".join(table_rows(results[-1])), flush=True)
    print("\n" + header + "\n" + "\n".join(row for r in results for row in table_rows(r)))
    print(json.dumps({"home": str(home), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
