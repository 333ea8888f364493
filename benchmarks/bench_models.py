"""Whole-model benchmark: tensortune against the engines a user would otherwise deploy.

For each model, in this one process: import it (the wider zoo through its ONNX export, as the
service receives a model; the first zoo through torch.export, or every zoo model through ONNX
with ``--onnx``), tune it with tensortune (``--trials`` in total and at most
``--tune-minutes``, gradient task scheduler), build and save it; then time, in interleaved
rounds, the tuned tensortune module, ONNX Runtime, OpenVINO, PyTorch eager, ``torch.compile``
and TVM untuned (and MetaSchedule's ``tune_relax`` at the same trials with ``--metaschedule``;
about an hour per model here). Every engine is timed the way a user calls it: numpy in, numpy out,
wall clock around the call. Every output is checked against PyTorch (against ONNX Runtime for
an ``.onnx`` file). Prints each model's latencies and per-function profile as it finishes (and
saves its row as ``bench-<model>.json`` under the home), then a table of latencies, tuning
time and ratios with the geometric mean of tensortune / each peer and / the best peer, and one
JSON line; a model that fails is named (in the table too) and the others still run.

    python benchmarks/bench_models.py [--models resnet18,...|wider|first|model.onnx]
        [--trials 1000] [--tune-minutes 15] [--onnx | --torch-export] [--metaschedule]
        [--home DIR] [--reuse]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tensortune.measure import use_threads
from tensortune.peers import fma_peak_gflops, metaschedule_builder
from tensortune.peers.models import (ModelPeer, check_close, export_onnx, onnxruntime_peer,
                                     openvino_peer, time_interleaved, torch_peer, warm)
from tensortune.peers.ort_profile import onnxruntime_profile
from tensortune.session import Session
from tensortune.settings import Settings
from tensortune.tasks import CompiledModel
from tensortune.tasks.graph import GraphOptions
from tensortune.tasks.profile import profile_model
from tensortune.zoo import WIDER_ZOO, default_image_size, zoo_model

DEFAULT_MODELS = "resnet18,mobilenet_v2,resnet50,bert_base"
ALIASES = {"first": DEFAULT_MODELS.split(","), "wider": list(WIDER_ZOO)}
ENGINES = ("tensortune", "onnxruntime", "openvino", "pytorch", "torch.compile", "untuned",
           "metaschedule")


def metaschedule_model(session: Session, trials: int, work_dir: Path):
    """Tune the session's model with MetaSchedule (same passes, same target) and compile it."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tensortune.tasks.extract import fused_module, prepare

    target = tvm.target.Target(session.target)
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    start = time.perf_counter()
    fused = fused_module(session.model, session.target, session.graph)
    # MetaSchedule's warm-up gives every task one batch of num_trials_per_iter; at its default of
    # 64 a budget under 128 x tasks leaves the last tasks untuned (naive code), so size the batch
    # the way tensortune's scheduler sizes its warm-up
    n_tasks = len(ms.relax_integration.extract_tasks(fused, target))
    per_iter = max(8, min(64, trials // (2 * max(1, n_tasks))))
    db = ms.relax_integration.tune_relax(fused, params={}, target=target, work_dir=str(work_dir),
                                         max_trials_global=trials, num_trials_per_iter=per_iter,
                                         builder=metaschedule_builder())
    tune_s = time.perf_counter() - start
    prepared = prepare(session.model.mod, session.graph, session.target)
    ex = ms.relax_integration.compile_relax(db, prepared, target, params=None)
    m = session.model
    return CompiledModel(ex, m.inputs, m.outputs, (), m.name, dict(session.target)), tune_s


def graph_of(args) -> GraphOptions:
    return GraphOptions(layout=args.layout, winograd=not args.no_winograd,
                        fast_math=not args.no_fast_math,
                        expand_depthwise=not args.no_expand_depthwise,
                        grouped_conv=not args.no_grouped_conv,
                        slice_first=not args.no_slice_first, attention=not args.no_attention,
                        conv1d=not args.no_conv1d, norms=not args.no_norms,
                        fold_pads=not args.no_fold_pads)


def via_onnx(name: str, args) -> bool:
    """Whether a zoo model is imported from its ONNX export: the wider zoo by default."""
    return args.onnx or (name in WIDER_ZOO and not args.torch_export)


def session_for(name: str, args, settings: Settings,
                home: Path) -> tuple[Session, list, object, Path]:
    """The model's session, its example inputs (numpy), the torch module (None for an ONNX
    file) and the ONNX file the ONNX peers run."""
    if name.endswith(".onnx"):
        s = Session.from_onnx(name, settings=settings, graph=graph_of(args))
        inputs = s.model.random_inputs(seed=0)
        return s, inputs, None, Path(name)
    size = args.image_size or default_image_size(name)
    module, example = zoo_model(name, batch=args.batch, image_size=size, seq_len=args.seq_len)
    x = [t.numpy() for t in example]
    shape = "x".join(str(d) for d in x[0].shape)
    path = export_onnx(module, example, home / "onnx" / f"{name}-{shape}.onnx")
    if via_onnx(name, args):
        s = Session.from_onnx(path, settings=settings, graph=graph_of(args))
        s.spec.update(zoo=name, image_size=size, seq_len=args.seq_len)
        return s, x, module, path
    s = Session.from_torch(module, example, name=name, settings=settings, graph=graph_of(args))
    s.spec.update(source="zoo", batch=args.batch, image_size=size, seq_len=args.seq_len)
    return s, x, module, path


def deadline_step(minutes: float | None):
    """An ``on_step`` for ``Session.tune`` that ends the schedule once ``minutes`` have passed
    (checked after each batch, so a batch under way finishes)."""
    if not minutes:
        return None
    end = time.perf_counter() + 60 * minutes
    return lambda task, trials: time.perf_counter() > end


def bench_one(name: str, args, settings: Settings, home: Path, peak: float) -> dict:
    threads = settings.measure.threads
    s, x, module, onnx_path = session_for(name, args, settings, home)
    label = Path(name).stem
    trials, confirmed, tune_s = 0, 0, None
    if not args.reuse:
        start = time.perf_counter()
        schedule = s.tune(args.trials, on_step=deadline_step(args.tune_minutes))
        trials, confirmed = schedule.trials, schedule.confirmed
        tune_s = time.perf_counter() - start
    s.build()
    # timed as users run it: the saved module, loaded (its kernels on tensortune's launcher)
    tuned = CompiledModel.load(s.save(), threads=threads)
    # profiled before any peer runs in this process: the threads ONNX Runtime, OpenVINO and
    # PyTorch leave behind distorted it (attention functions 1.4-2.1x their fresh-process times)
    profile = profile_model(tuned, repeat=20, peak_gflops=peak).to_json()
    peers: dict[str, ModelPeer] = {"tensortune": ModelPeer("tensortune",
                                                           lambda a: tuned.run(*a))}
    peers["onnxruntime"] = onnxruntime_peer(onnx_path, threads)
    peers["openvino"] = openvino_peer(onnx_path, threads)
    if module is not None:
        peers["pytorch"] = torch_peer(module, threads)
        if not args.no_compile:
            peers["torch.compile"] = torch_peer(module, threads, compile=True)
    if not args.no_untuned:
        untuned = s.build(tuned=False)
        peers["untuned"] = ModelPeer("untuned", lambda a: untuned.run(*a))
        s.build()  # the tuned module again, for the session's own calls
    if args.metaschedule:
        ms_model, ms_tune = metaschedule_model(s, args.trials, home / f"ms-{label}")
        peers["metaschedule"] = ModelPeer("metaschedule", lambda a: ms_model.run(*a), ms_tune)
    reference_name = "pytorch" if "pytorch" in peers else "onnxruntime"
    expected = warm(peers[reference_name], x)
    errors = {}
    for engine, peer in peers.items():
        errors[engine] = check_close(engine, warm(peer, x), expected)
    slow = {"untuned"}  # seconds per call: a round of one is enough
    times = time_interleaved({e: (lambda p=p: p.run(x)) for e, p in peers.items()
                              if e not in slow}, rounds=args.rounds, per_round=args.per_round)
    times.update(time_interleaved({e: (lambda p=p: p.run(x)) for e, p in peers.items()
                                   if e in slow}, rounds=1, per_round=2))
    ms = {e: float(np.median(t)) * 1e3 for e, t in times.items()}
    peer_ms, peer_kernels = onnxruntime_profile(onnx_path, x, threads)
    row = {"model": label, "import": "torch.export" if s.spec["source"] == "zoo" else "onnx",
           "input_shapes": [list(a.shape) for a in x],
           "tasks": len([t for t in s.extract() if t.tunable]), "trials": trials,
           "confirmed": confirmed,
           "tune_s": tune_s, "import_s": s.stages.get("import"), "ms": ms,
           "spread": {e: [min(t) * 1e3, max(t) * 1e3] for e, t in times.items()},
           "build_s": {e: p.build_s for e, p in peers.items()}, "max_error": errors,
           "time_evaluator_ms": tuned.time(repeat=20).median * 1e3,
           "profile": profile, "run_id": s.run_id, "graph": s.spec["graph"],
           "onnxruntime_profile": {"kernels_ms": peer_ms,
                                   "kernels": [dataclasses.asdict(k) for k in peer_kernels]}}
    best_peer = min((v, e) for e, v in ms.items() if e not in ("tensortune", "untuned"))
    row["vs_best_peer"] = ms["tensortune"] / best_peer[0]
    row["best_peer"] = best_peer[1]
    print(f"[{label}] " + ", ".join(f"{e} {v:.2f} ms" for e, v in ms.items())
          + f"; tensortune / best peer ({best_peer[1]}) = {row['vs_best_peer']:.2f}", flush=True)
    return row


def print_profile(row: dict, top: int = 12) -> None:
    p = row["profile"]
    print(f"\n{row['model']}: {p['latency_ms']:.2f} ms = kernels {p['kernels_ms']:.2f} + "
          f"runtime {p['overhead_ms']:.2f} (builtins {p['builtins_ms']:.2f}); "
          f"{p['gflops']:.1f} GFLOP/s overall, FMA peak {p['peak_gflops']:.0f}")
    print("| function | calls | ms | share | GFLOP/s | of peak | tuned |\n|---|---|---|---|---|---|---|")
    for f in p["functions"][:top]:
        peak = "-" if f["of_peak"] is None else f"{100 * f['of_peak']:.0f}%"
        print(f"| {f['name']} | {f['calls']} | {f['ms']:.3f} | {100 * f['share']:.1f}% | "
              f"{f['gflops']:.1f} | {peak} | {'yes' if f['tuned'] else 'no'} |")
    rest = p["functions"][top:]
    if rest:
        print(f"| {len(rest)} more | | {sum(f['ms'] for f in rest):.3f} | "
              f"{100 * sum(f['share'] for f in rest):.1f}% | | | |")
    peer = row.get("onnxruntime_profile")
    if peer:  # the same model in ONNX Runtime's own profile (profiling slows it a little)
        print(f"\nONNX Runtime's kernels: {peer['kernels_ms']:.2f} ms a run (profiled)")
        print("| kernel | output | calls | ms |\n|---|---|---|---|")
        for k in peer["kernels"][:top]:
            print(f"| {k['op']} | {k['shape']} | {k['calls']} | {k['ms']:.3f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT_MODELS,
                    help="zoo names and/or paths of .onnx files, comma-separated; 'wider' is "
                         "the wider zoo, 'first' the default four")
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--tune-minutes", type=float, default=15.0,
                    help="end each model's tuning after this long (0: no limit)")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--onnx", action="store_true",
                     help="import every zoo model through its ONNX export (the wider zoo's "
                          "default)")
    how.add_argument("--torch-export", action="store_true",
                     help="import every zoo model through torch.export")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--image-size", type=int, default=None,
                    help="input height and width (default: each model's own, e.g. 640 YOLO)")
    ap.add_argument("--seq-len", type=int, default=128, help="tokens (bert_base, gpt2_small)")
    ap.add_argument("--layout", default="nhwc", help="nhwc (default) or nchw")
    ap.add_argument("--no-winograd", action="store_true", help="direct 3x3 convolutions only")
    ap.add_argument("--no-fast-math", action="store_true", help="libm exp, erf and tanh")
    ap.add_argument("--no-expand-depthwise", action="store_true",
                    help="1x1 and depthwise convolutions as separate kernels")
    ap.add_argument("--no-attention", action="store_true",
                    help="attention as imported: its matmuls and softmax apart")
    ap.add_argument("--no-conv1d", action="store_true",
                    help="keep 1-D convolutions in NCW (tasks.conv1d)")
    ap.add_argument("--no-norms", action="store_true",
                    help="keep ONNX's decomposed group and instance norms (tasks.norms)")
    ap.add_argument("--no-fold-pads", action="store_true",
                    help="zero pads before convolutions as kernels of their own (tasks.pads)")
    ap.add_argument("--no-slice-first", action="store_true",
                    help="Q, K, V copied out of a permuted or split projection (tasks.slices)")
    ap.add_argument("--no-grouped-conv", action="store_true",
                    help="grouped convolutions in TOPI's form (vectorized along channels)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-round", type=int, default=10)
    ap.add_argument("--metaschedule", action="store_true",
                    help="also tune with MetaSchedule at the same trials (about an hour a model)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--no-untuned", action="store_true",
                    help="skip TVM's untuned build (seconds to minutes a call on large inputs)")
    ap.add_argument("--home", default=None, help="tensortune home (default: a fresh temp dir)")
    ap.add_argument("--reuse", action="store_true",
                    help="don't tune: build from the records already in --home")
    args = ap.parse_args(argv)
    home = Path(args.home or tempfile.mkdtemp(prefix="tt-bench-models-"))
    settings = dataclasses.replace(Settings.from_env(), home=home)
    threads = settings.measure.threads
    use_threads(threads)
    peak = fma_peak_gflops(threads)
    print(f"home {home}, threads {threads}, trials {args.trials}, at most {args.tune_minutes:g} "
          f"min each, FMA peak {peak:.0f} GFLOP/s, cpu {_cpu_name()}", flush=True)
    rows, failed = [], {}
    names = [m for n in args.models.split(",") if n.strip()
             for m in ALIASES.get(n.strip(), [n.strip()])]
    for name in names:
        # one model's failure is reported and the others still run; each finished model's
        # row and profile are out (and saved) before the next starts
        try:
            row = bench_one(name, args, settings, home, peak)
        except Exception as err:  # a model the frontend, a template or a peer cannot take
            first = (str(err).splitlines() or [""])[0][:300]
            print(f"[{name}] failed: {type(err).__name__}: {first}", flush=True)
            failed[name] = f"{type(err).__name__}: {first}"
            continue
        rows.append(row)
        print_profile(row)
        (home / f"bench-{row['model']}.json").write_text(json.dumps(row) + "\n")
    means = print_table(rows, failed)
    print(json.dumps({"trials": args.trials, "tune_minutes": args.tune_minutes,
                      "threads": threads, "peak_gflops": peak, "cpu": _cpu_name(),
                      "rows": rows, "geomean": means, "failed": failed}))
    return 1 if failed else 0


def geomean(values) -> float | None:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def print_table(rows: list[dict], failed: dict[str, str]) -> dict:
    """The per-model table, a geometric-mean row (tensortune / each peer over the models that
    peer ran, and tensortune / the best peer) and the failures; returns the means."""
    engines = [e for e in ENGINES if any(e in r["ms"] for r in rows)]
    print("\n| model | import | trials | tune s | " + " | ".join(f"{e} ms" for e in engines)
          + " | tensortune / best peer |\n|" + "---|" * (len(engines) + 5))
    for r in rows:
        cells = [f"{r['ms'][e]:.2f}" if e in r["ms"] else "-" for e in engines]
        tune = "-" if r["tune_s"] is None else f"{r['tune_s']:.0f}"
        print(f"| {r['model']} | {r.get('import', '-')} | {r['trials']} | {tune} | "
              + " | ".join(cells) + f" | {r['vs_best_peer']:.2f} ({r['best_peer']}) |")
    means = {e: geomean(r["ms"]["tensortune"] / r["ms"][e] for r in rows if e in r["ms"])
             for e in engines if e != "tensortune"}
    means["best peer"] = geomean(r["vs_best_peer"] for r in rows)
    if rows:
        cells = ["-" if means.get(e) is None else f"{means[e]:.2f}" for e in engines]
        print(f"| geomean tensortune / peer ({len(rows)} models) | | | | " + " | ".join(cells)
              + f" | {means['best peer']:.2f} |")
    for name, why in failed.items():
        print(f"| {name} | failed: {why} |" + " |" * (len(engines) + 3))
    print("(median of per-round medians; wall clock around each engine's numpy-in, numpy-out "
          "call; ratios < 1 mean tensortune is faster; tune s is the tuning wall time)")
    return means


def _cpu_name() -> str:
    """Model name, family/model (which tells Zen 3 from Zen 4) and the widest vector ISA."""
    try:
        fields = {}
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
        isa = "avx512" if "avx512f" in fields.get("flags", "").split() else "avx2"
        return (f"{fields.get('model name', '?')}, family {fields.get('cpu family', '?')} "
                f"model {fields.get('model', '?')}, {isa}, {os.cpu_count()} CPUs")
    except OSError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
