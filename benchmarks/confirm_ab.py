"""Cold-weight timing and confirmation (``tasks.confirm``) against the plain recorded best.

For each model (through ONNX): tune it twice in fresh homes, once as before (weights warm, the
recorded best kept: ``plain``) and once with this session's measurement (weights flushed before
each timing, the heavy tasks' best four timed three times more: ``cold+confirm``), the order
alternating from model to model. The second run is also built from its first timings alone
(``cold``: the confirming records ignored). All three and the peers are then timed in
interleaved rounds (``results-confirm-*.txt``).

    .venv/bin/python benchmarks/confirm_ab.py --models deit_small,bert_base --tune-minutes 6
"""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_models import deadline_step, session_for
from tensortune.measure import use_threads
from tensortune.peers import fma_peak_gflops
from tensortune.peers.models import (ModelPeer, check_close, onnxruntime_peer, openvino_peer,
                                     time_interleaved, warm)
from tensortune.records import best_record, load_records
from tensortune.settings import Settings
from tensortune.tasks import CompiledModel


def variant(settings: Settings, home: Path, new: bool) -> Settings:
    m = dataclasses.replace(settings.measure, cold_weights=new)
    s = dataclasses.replace(settings.search, confirm_rounds=3 if new else 0)
    return dataclasses.replace(settings, home=home, measure=m, search=s)


def first_timings_best(session) -> dict:
    """Each task's best config by its first timings (confirming records left out)."""
    records = [r for r in load_records(session.records_path) if not r.confirm]
    best = {}
    for t in session.extract():
        r = best_record(records, t.task) if t.tunable else None
        if r is not None:
            best[t.key] = r.config
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="deit_small,bert_base")
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--tune-minutes", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--per-round", type=int, default=10)
    args = ap.parse_args()
    # what session_for reads of bench_models' arguments
    args.onnx, args.torch_export, args.batch, args.image_size = True, False, 1, None
    args.seq_len, args.layout = 128, "nhwc"
    args.no_winograd = args.no_fast_math = args.no_expand_depthwise = False
    args.no_grouped_conv = args.no_slice_first = args.no_attention = False
    args.no_conv1d = False
    base = Settings.from_env()
    threads = base.measure.threads
    use_threads(threads)
    root = Path(tempfile.mkdtemp(prefix="tt-confirm-ab-"))
    print(f"home {root}, threads {threads}, FMA peak {fma_peak_gflops(threads):.0f} GFLOP/s",
          flush=True)
    for i, name in enumerate(args.models.split(",")):
        sessions, tune_s = {}, {}
        order = ("plain", "cold+confirm") if i % 2 == 0 else ("cold+confirm", "plain")
        for label in order:
            settings = variant(base, root / f"{name}-{label.replace('+', '-')}",
                               label != "plain")
            s, x, _, onnx_path = session_for(name, args, settings, root)
            start = time.perf_counter()
            sched = s.tune(args.trials, on_step=deadline_step(args.tune_minutes))
            tune_s[label] = time.perf_counter() - start
            print(f"[{name}] {label}: {sched.trials} trials, {sched.confirmed} confirming "
                  f"timings, {tune_s[label]:.0f} s", flush=True)
            sessions[label] = s
        built = {}
        for label, s in sessions.items():
            s.build()
            built[label] = CompiledModel.load(s.save(), threads=threads)
        s = sessions["cold+confirm"]
        s.build(best=first_timings_best(s))
        built["cold"] = CompiledModel.load(s.save(root / f"{name}-cold-module"), threads=threads)
        peers = {label: ModelPeer(label, lambda a, m=m: m.run(*a)) for label, m in built.items()}
        peers["onnxruntime"] = onnxruntime_peer(onnx_path, threads)
        peers["openvino"] = openvino_peer(onnx_path, threads)
        expected = warm(peers["onnxruntime"], x)
        for engine, peer in peers.items():
            check_close(engine, warm(peer, x), expected)
        times = time_interleaved({e: (lambda p=p: p.run(x)) for e, p in peers.items()},
                                 rounds=args.rounds, per_round=args.per_round)
        ms = {e: float(np.median(t)) * 1e3 for e, t in times.items()}
        best_peer = min(ms["onnxruntime"], ms["openvino"])
        print(f"[{name}] " + ", ".join(
            f"{e} {v:.2f} ms ({v / best_peer:.3f} of best peer)" for e, v in ms.items()),
            flush=True)
        print(f"[{name}] spread " + ", ".join(
            f"{e} {min(t) * 1e3:.2f}-{max(t) * 1e3:.2f}" for e, t in times.items()), flush=True)


if __name__ == "__main__":
    main()
