"""Single-operator benchmark: tensortune vs MetaSchedule (same trial budget) vs PyTorch.

Runs every peer in this one process, one after the other, and prints latencies, GFLOP/s, tuning
wall time and the ratios, then one JSON line. Absolute times drift between runs on shared
machines; the ratios, measured side by side, are the result.

    python benchmarks/bench_ops.py [--trials 256] [--ops c7,c12,matmul,dense]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from tensortune.measure import use_threads
from tensortune.peers import fma_peak_gflops, metaschedule_tune, time_tvm_module, torch_time
from tensortune.records import build_best
from tensortune.settings import Settings
from tensortune.tuner import tune_task
from tensortune.workload import Conv2d, Dense, Matmul, Task, default_target

OPS = {
    "c7": Conv2d(n=1, c=128, h=28, w=28, filters=256, kh=3, kw=3, stride=2, padding=1),
    "c12": Conv2d(n=1, c=512, h=7, w=7, filters=512, kh=3, kw=3, stride=1, padding=1),
    "matmul": Matmul(m=512, n=512, k=512),
    "dense": Dense(batch=128, in_features=768, out_features=3072),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--tuner", default="xgb")
    ap.add_argument("--features", default="knob")
    ap.add_argument("--no-metaschedule", action="store_true")
    ap.add_argument("--workdir", default=None, help="keep logs here (default: a temp dir)")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.ops.split(",") if n.strip()]
    unknown = [n for n in names if n not in OPS]
    if unknown:
        ap.error(f"unknown op(s) {unknown}; known: {', '.join(OPS)}")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tt-bench-"))
    settings = Settings.from_env()
    threads = settings.measure.threads
    use_threads(threads)  # every TVM kernel timed in this process (ours, MetaSchedule's) alike
    target = default_target(threads)
    peak = fma_peak_gflops(threads)
    print(f"target {target}, FMA peak {peak:.0f} GFLOP/s, trials {args.trials}, logs in {workdir}",
          flush=True)
    rows = []
    for name in names:
        w = OPS[name]
        task = Task(w, target)
        log = workdir / f"{name}.jsonl"
        t0 = time.perf_counter()
        res = tune_task(task, args.trials, tuner=args.tuner, log=log, settings=settings,
                        resume=False, features=args.features)
        tt_wall = time.perf_counter() - t0
        module, _, _ = build_best(log, task)
        tt_s = time_tvm_module(module, w, "tensortune")
        row = {"op": name, "workload": w.describe(), "trials": res.trials, "tt_us": tt_s * 1e6,
               "tt_gflops": w.flops / tt_s / 1e9, "tt_tune_s": tt_wall, "tt_errors": res.errors}
        print(f"[{name}] tensortune {row['tt_us']:.1f} us ({row['tt_gflops']:.1f} GFLOP/s) "
              f"after {res.trials} trials in {tt_wall:.0f} s", flush=True)
        if not args.no_metaschedule:
            ms_s, ms_wall = metaschedule_tune(w, target, args.trials, workdir / f"ms-{name}")
            row.update(ms_us=ms_s * 1e6, ms_gflops=w.flops / ms_s / 1e9, ms_tune_s=ms_wall,
                       speedup_vs_ms=ms_s / tt_s, tune_time_vs_ms=tt_wall / ms_wall)
            print(f"[{name}] MetaSchedule {row['ms_us']:.1f} us ({row['ms_gflops']:.1f} GFLOP/s) "
                  f"in {ms_wall:.0f} s", flush=True)
        torch_s = torch_time(w, threads=threads)
        row.update(torch_us=torch_s * 1e6, torch_gflops=w.flops / torch_s / 1e9,
                   speedup_vs_torch=torch_s / tt_s, tt_peak_fraction=w.flops / tt_s / 1e9 / peak)
        rows.append(row)
    _table(rows, peak)
    print(json.dumps({"peak_gflops": peak, "trials": args.trials, "rows": rows}))
    return 0


def _table(rows, peak) -> None:
    head = ("op", "tt us", "tt GF/s", "%peak", "tt tune s", "MS us", "MS GF/s", "MS tune s",
            "torch us", "torch GF/s", "MS/tt", "torch/tt", "tune tt/MS")
    print("\n| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        cells = [r["op"], f"{r['tt_us']:.1f}", f"{r['tt_gflops']:.1f}",
                 f"{100 * r['tt_peak_fraction']:.0f}%", f"{r['tt_tune_s']:.0f}",
                 f"{r.get('ms_us', float('nan')):.1f}", f"{r.get('ms_gflops', float('nan')):.1f}",
                 f"{r.get('ms_tune_s', float('nan')):.0f}", f"{r['torch_us']:.1f}",
                 f"{r['torch_gflops']:.1f}", f"{r.get('speedup_vs_ms', float('nan')):.2f}",
                 f"{r['speedup_vs_torch']:.2f}", f"{r.get('tune_time_vs_ms', float('nan')):.2f}"]
        print("| " + " | ".join(cells) + " |")
    print(f"(peak {peak:.0f} GFLOP/s; MS/tt > 1 means tensortune is faster)")


if __name__ == "__main__":
    sys.exit(main())
