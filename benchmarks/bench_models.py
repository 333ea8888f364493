"""Whole-model benchmark: tensortune vs PyTorch eager vs TVM untuned vs MetaSchedule.

For each model (default ResNet-18 and MobileNet V2, batch 1, 224x224), in this one process:
tune with tensortune (gradient task scheduler, ``--trials`` in total), build and time it; time
PyTorch eager with the same threads; build and time TVM's untuned default; tune the same module
with MetaSchedule's ``tune_relax`` at the same total trials and time ``compile_relax``'s result.
All outputs are checked against PyTorch. Prints a table and one JSON line.

    python benchmarks/bench_models.py [--models resnet18,mobilenet_v2] [--trials 1000]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tensortune.measure import use_threads
from tensortune.peers import metaschedule_builder
from tensortune.settings import Settings
from tensortune.session import Session


def metaschedule_model(session: Session, trials: int, work_dir: Path):
    """Tune the session's model with MetaSchedule (same passes, same target) and compile it."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tensortune.tasks import CompiledModel
    from tensortune.tasks.extract import fused_module, prepare

    target = tvm.target.Target(session.target)
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    start = time.perf_counter()
    # MetaSchedule extracts tasks from an already legalized and fused module; compile_relax then
    # runs the same passes on the prepared module and looks the functions up in its database
    fused = fused_module(session.model, session.target)
    # MetaSchedule's warm-up gives every task one batch of num_trials_per_iter; at its default of
    # 64 a budget under 128 x tasks leaves the last tasks untuned (naive code), so size the batch
    # the way tensortune's scheduler sizes its warm-up
    n_tasks = len(ms.relax_integration.extract_tasks(fused, target))
    per_iter = max(8, min(64, trials // (2 * max(1, n_tasks))))
    db = ms.relax_integration.tune_relax(fused, params={}, target=target, work_dir=str(work_dir),
                                         max_trials_global=trials, num_trials_per_iter=per_iter,
                                         builder=metaschedule_builder())
    tune_s = time.perf_counter() - start
    ex = ms.relax_integration.compile_relax(db, prepare(session.model.mod), target, params=None)
    m = session.model
    return CompiledModel(ex, m.inputs, m.outputs, (), m.name, dict(session.target)), tune_s


def _check(name, got, expected):
    err = float(np.max(np.abs(got - expected)))
    scale = max(1.0, float(np.max(np.abs(expected))))
    if err > 1e-3 * scale:
        raise RuntimeError(f"{name} output differs from PyTorch (max abs error {err:.3g})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--no-metaschedule", action="store_true")
    ap.add_argument("--home", default=None, help="tensortune home (default: a fresh temp dir)")
    ap.add_argument("--reuse", action="store_true",
                    help="don't tune: build from the records already in --home (peers only)")
    args = ap.parse_args(argv)
    home = Path(args.home or tempfile.mkdtemp(prefix="tt-bench-models-"))
    settings = dataclasses.replace(Settings.from_env(), home=home)
    use_threads(settings.measure.threads)
    print(f"home {home}, threads {settings.measure.threads}, trials {args.trials}", flush=True)
    rows = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        s = Session.from_zoo(name, batch=args.batch, settings=settings)
        x = [t.numpy() for t in s._torch[1]]
        import torch

        with torch.no_grad():
            expected = s._torch[0](*s._torch[1])
        expected = (expected[0] if isinstance(expected, tuple) else expected).numpy()
        t0 = time.perf_counter()
        trials = 0 if args.reuse else s.tune(args.trials).trials
        tt_tune = None if args.reuse else time.perf_counter() - t0
        s.build()
        _check("tensortune", s.run(*x)[0], expected)
        tuned = s.compiled.time(repeat=20).median
        torch_ms = s.torch_latency_ms(repeat=30)
        untuned_model = s.build(tuned=False)
        _check("untuned", untuned_model.run(*x)[0], expected)
        untuned = untuned_model.time(repeat=3).median
        row = {"model": name, "tasks": len([t for t in s.extract() if t.tunable]),
               "trials": trials, "tt_ms": tuned * 1e3, "tt_tune_s": tt_tune,
               "torch_ms": torch_ms, "untuned_ms": untuned * 1e3}
        spent = "reused records" if args.reuse else f"{trials} trials in {tt_tune:.0f} s"
        print(f"[{name}] tensortune {row['tt_ms']:.2f} ms ({spent}); PyTorch {torch_ms:.2f} ms; "
              f"untuned {row['untuned_ms']:.1f} ms", flush=True)
        if not args.no_metaschedule:
            ms_model, ms_tune = metaschedule_model(s, args.trials, home / f"ms-{name}")
            _check("MetaSchedule", ms_model.run(*x)[0], expected)
            row.update(ms_ms=ms_model.time(repeat=20).median * 1e3, ms_tune_s=ms_tune)
            print(f"[{name}] MetaSchedule {row['ms_ms']:.2f} ms in {ms_tune:.0f} s", flush=True)
        row["tt_vs_torch"] = row["tt_ms"] / torch_ms
        row["tt_vs_ms"] = row["tt_ms"] / row["ms_ms"] if "ms_ms" in row else None
        rows.append(row)
    head = ("model", "tasks", "trials", "tt ms", "tt tune s", "torch ms", "untuned ms", "MS ms",
            "MS tune s", "tt/torch", "tt/MS")
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        f = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
        print(f"| {r['model']} | {r['tasks']} | {r['trials']} | {f(r['tt_ms'])} | "
              f"{f(r['tt_tune_s'], 0)} | {f(r['torch_ms'])} | {f(r['untuned_ms'], 1)} | "
              f"{f(r.get('ms_ms'))} | {f(r.get('ms_tune_s'), 0)} | {f(r['tt_vs_torch'])} | "
              f"{f(r['tt_vs_ms'])} |")
    print("(tt/torch < 1 means tensortune is faster; the target is <= 0.8 on ResNet-18)")
    print(json.dumps({"trials": args.trials, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
