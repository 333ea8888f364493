"""``cuda.gemm`` against ``cuda.generic`` and cuBLAS on a GPU: one batch, built here, timed there.

``export`` builds, for the 512^3 matmul and BERT's 128x768 -> 3072 dense, every seed of the
``cuda.gemm`` template, ``--random`` distinct valid random configs of its space, and the
fastest ``cuda.generic`` configs the H100 rounds found (``benchmarks/cuda/timings-h100*``: the
baseline), into one batch for ``python -m tensortune.device_runner``, with ``roles.json``
saying which candidate is which. Kernels are built exactly as tuning builds them
(``LocalBuilder``: template, TVM, nvcc), duplicates (the same cubin) dropped, and a sample of
them run here first on the CPU emulator (``cuda_emulator.py``) against numpy (``--emulate``). ``report`` (on
the GPU host: numpy, CuPy and, with ``--peers``, PyTorch; no TVM) gives per workload the
best of each role from the device runner's ``results.jsonl``, and with ``--peers`` times the
best ``cuda.gemm`` and ``cuda.generic`` kernels again beside PyTorch's cuBLAS (FP32, TF32 off),
interleaved, as ``bench_cuda_peers.py`` does.

    python benchmarks/bench_cuda_gemm.py export --out .gpu/gemm-r1 [--random 300]
    python -m tensortune.device_runner .gpu/gemm-r1            # on the GPU host
    python benchmarks/bench_cuda_gemm.py report .gpu/gemm-r1 [--peers] [--json OUT]

The emulator is ``cuda_emulator.py`` beside this file.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_emulator import emulate  # noqa: E402

WORKLOADS = ("matmul_512", "dense_128x768x3072")
ROLES = ("seed", "neighbour", "random", "generic")
TARGET = {"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}}
GENERIC_TIMINGS = ("benchmarks/cuda/timings-h100.jsonl.gz",
                   "benchmarks/cuda/timings-h100-r1-r4.jsonl.gz")


# -- export (here: TVM, nvcc) ------------------------------------------------------------------------
def export(args) -> None:
    from tvm.s_tir import Schedule

    from tensortune.dataset.base import benchmark_workloads
    from tensortune.measure import LocalBuilder, MeasureInput
    from tensortune.measure.cuda_export import write_batch
    from tensortune.settings import Settings
    from tensortune.space import Config, task_space
    from tensortune.space.analysis import short_name
    from tensortune.space.cuda_gemm import K_PARTS, check_limits
    from tensortune.space.cuda_gemm_info import prepare_gemm
    from tensortune.space.cuda_gemm_seeds import gemm_seeds
    from tensortune.workload import Task

    out = Path(args.out)
    if (out / "manifest.json").exists():
        raise SystemExit(f"{out} already holds a batch; export into a new directory")
    settings = Settings()
    named = benchmark_workloads()
    rng = np.random.default_rng(args.seed)
    items, roles, summary = [], [], {}
    start = time.perf_counter()
    with LocalBuilder(args.workers, 120) as builder:
        for name in args.workloads.split(","):
            workload = named[name]
            task = Task(workload, TARGET, "cuda.gemm")
            space = task_space(task)
            _, info, _ = prepare_gemm(Schedule(workload.prim_func()))
            knob = {k.name: k for k in space.knobs}
            tiles = [f"tile_{short_name(n)}" for n, _ in (info.m, info.n, info.k)]

            def fits(config) -> bool:
                try:
                    check_limits(info, config[tiles[0]], config[tiles[1]], config[tiles[2]],
                                 config["pipeline"], config["transpose"], config["pad"],
                                 *K_PARTS[config["k_parts"]])
                    return True
                except Exception:  # noqa: BLE001 - InvalidConfigError: a limit broken
                    return False

            seeds = gemm_seeds(space, workload.prim_func(), limit=args.seeds)
            kept: dict[str, tuple] = {}  # cubin sha1 -> (input, build, role)
            stats = {r: [0, 0] for r in ROLES}  # built, failed
            build_s = []

            def build(configs, role, the_task=task) -> int:
                inputs = [MeasureInput(the_task, c) for c in configs]
                added = 0
                for inp, res in zip(inputs, builder.build(inputs)):
                    if res.error.value != "none":
                        stats[role][1] += 1
                        print(f"  {role} build failed ({res.error.value}): {res.message[:120]}")
                        continue
                    stats[role][0] += 1
                    build_s.append(res.build_s)
                    digest = hashlib.sha1(Path(res.path).read_bytes()).hexdigest()
                    if digest not in kept:
                        kept[digest] = (inp, res, role)
                        added += 1
                return added

            t0 = time.perf_counter()
            build(seeds, "seed")
            seen = set(seeds)
            near = [c for c in neighbours(workload, args.neighbours, tiles[2])
                    if c not in seen and c in space and fits(c)]
            build(near, "neighbour")
            seen.update(near)
            randoms = 0
            for _ in range(40):  # rounds of draws until --random distinct kernels are built
                if randoms >= args.random:
                    break
                want = args.random - randoms
                draws = []
                for _ in range(200000):
                    if len(draws) >= want + max(4, want // 10):
                        break
                    c = space.sample(rng)
                    if c not in seen and fits(c):
                        seen.add(c)
                        draws.append(c)
                randoms += build(draws[:want + max(4, want // 10)], "random")
            # keep exactly --random of the random ones (the first built)
            extra = randoms - args.random
            for digest in [d for d, v in kept.items() if v[2] == "random"][::-1]:
                if extra <= 0:
                    break
                del kept[digest]
                extra -= 1
            generic_task = Task(workload, TARGET, "cuda.generic")
            generic = best_generic(workload, args.generic)
            build([Config.from_json(c) for c in generic], "generic", generic_task)
            elapsed = time.perf_counter() - t0
            roles_here = [v[2] for v in kept.values()]
            summary[name] = {
                "space_size": space.size, "knobs": {k: len(v.candidates) for k, v in knob.items()},
                "seeds": roles_here.count("seed"), "random": roles_here.count("random"),
                "neighbours": roles_here.count("neighbour"),
                "generic": roles_here.count("generic"), "built_failed": stats,
                "build_s_median": statistics.median(build_s) if build_s else None,
                "build_s_mean": statistics.mean(build_s) if build_s else None,
                "wall_s": elapsed,
            }
            print(f"{workload.describe()}: {summary[name]}")
            if args.emulate:
                emulate_sample(workload, [v for v in kept.values()], args.emulate, rng)
            for inp, res, role in kept.values():
                items.append((inp, res))
                roles.append({"workload": workload.key, "name": name, "role": role,
                              "template": inp.task.template})
        path = write_batch(out, items, seed=args.seed, rtol=settings.measure.rtol,
                           atol=settings.measure.atol, log="",
                           reference_bytes=8 << 20)  # whole references: bench_cuda_peers
    with open(out / "roles.json", "w") as f:
        json.dump({"roles": roles, "summary": summary,
                   "build_wall_s": time.perf_counter() - start}, f, indent=1)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"batch of {len(items)} candidates written to {path.parent} ({size / 1e6:.1f} MB) in "
          f"{time.perf_counter() - start:.0f} s")


def neighbours(workload, reports: list[Path], k_knob: str) -> list:
    """The fastest ``cuda.gemm`` configs of ``workload`` in earlier reports, each with K tiles
    of 8, 16 or 32, sliced in 2 or 4 or split in 2-4 (``k_parts``), under the four
    pipelines that won."""
    from tensortune.space import Config

    best = []
    for path in reports:
        for row in json.loads(Path(path).read_text())["rows"]:
            if row["workload"] == workload.to_dict():
                best += [b["config"] for b in row.get("gemm_best", [])]
                best += [b["config"] for role in ("seed", "random")
                         for b in (row.get(role) or {}).get("best", [])]
    out = {}
    for base in best:
        extent = math.prod(base[k_knob])
        # (round 3's reports named the two ways to cut K as knobs of their own)
        base = {k: v for k, v in base.items() if k not in ("slice_k", "split_k")}
        for bk in (8, 16, 32):
            for parts in ("slice2", "slice4", "split2", "split3", "split4"):
                for pipeline in ("prefetch", "double", "async2", "async3"):
                    c = {**base, k_knob: [extent // bk, bk], "k_parts": parts,
                         "pipeline": pipeline}
                    out[Config.from_json(c)] = None
    return list(out)


def best_generic(workload, k: int) -> list[dict]:
    """The ``k`` fastest distinct ``cuda.generic`` configs of ``workload`` in the H100 timings."""
    found: dict[str, float] = {}
    want = workload.to_dict()
    for rel in GENERIC_TIMINGS:
        path = ROOT / rel
        if not path.exists():
            continue
        with gzip.open(path, "rt") as f:
            for line in f:
                r = json.loads(line)
                if r["task"]["workload"] != want or r["task"]["template"] != "cuda.generic":
                    continue
                key = json.dumps(r["config"], sort_keys=True)
                found[key] = min(found.get(key, math.inf), r["seconds"])
    return [json.loads(c) for c, _ in sorted(found.items(), key=lambda kv: kv[1])[:k]]


def emulate_sample(workload, kept: list, n: int, rng) -> None:
    """Run every seed and ``n`` other candidates on the CPU emulator against numpy."""
    import tvm

    from tensortune.measure.cuda_build import launch_spec
    from tensortune.space import apply_config

    picked = [v for v in kept if v[2] == "seed"]
    rest = [v for v in kept if v[2] != "seed"]
    picked += [rest[i] for i in rng.permutation(len(rest))[:n]]
    inputs = [np.ascontiguousarray(x) for x in workload.random_inputs(0)]
    ref = workload.reference(*inputs)
    bad = 0
    for inp, res, role in picked:
        sch = apply_config(inp.task, inp.config)
        source = tvm.compile(sch.mod, target=inp.task.tvm_target()).mod.imports[0] \
            .inspect_source("cuda")
        t = time.perf_counter()
        ok = True
        for eager in (False, True) if "cp.async" in source else (False,):
            out = np.full(ref.shape, np.nan, dtype=np.float32)
            spec = launch_spec(res.path)
            scratch = [np.full(s["shape"], np.nan, s["dtype"]) for s in spec["scratch"]]
            emulate(source, spec["kernels"], [*inputs, out, *scratch], eager=eager)
            ok = ok and bool(np.allclose(out, ref, rtol=1e-3, atol=1e-3))
        bad += not ok
        print(f"  emulated {role} {dict(inp.config)}: {'ok' if ok else 'WRONG'} "
              f"({time.perf_counter() - t:.1f} s)")
    if bad:
        raise SystemExit(f"{bad} emulated kernels of {workload.describe()} gave wrong results")


# -- report (on the GPU host: numpy, CuPy, torch; no TVM) ------------------------------------------
def report(args) -> None:
    from tensortune.device_runner.batch import load_batch, read_results

    batch = load_batch(args.batch)
    roles_file = Path(args.batch) / "roles.json"
    if roles_file.exists():
        roles = json.loads(roles_file.read_text())["roles"]
    else:  # a `tensortune measure export` round: the tuner's proposals, counted as "random"
        roles = [{"role": "random"}] * (1 + max(c.index for c in batch.candidates))
    results = read_results(Path(args.batch) / "results.jsonl")
    table = []
    for data_name in batch.data:
        cands = [c for c in batch.candidates if c.data == data_name]
        row = {"workload": cands[0].record["task"]["workload"], "data": data_name}
        for role in ROLES:
            timed, errors = [], 0
            for c in cands:
                if roles[c.index]["role"] != role:
                    continue
                line = results.get(c.index)
                if line is None:
                    continue
                if line.get("error") != "none" or not line.get("costs"):
                    errors += 1
                    continue
                timed.append((statistics.median(line["costs"]), c))
            timed.sort(key=lambda t: t[0])
            row[role] = {"timed": len(timed), "errors": errors,
                         "best_us": timed[0][0] * 1e6 if timed else None,
                         "median_us": statistics.median(t for t, _ in timed) * 1e6 if timed else None,
                         "best": [{"index": c.index, "us": t * 1e6, "config": c.record["config"]}
                                  for t, c in timed[:args.top]]}
        gemm = sorted([b for r in ("seed", "neighbour", "random") for b in row[r]["best"]],
                      key=lambda b: b["us"])[:args.top]
        row["gemm_best"] = gemm
        table.append(row)
    print("| workload | cuda.gemm best us (seeds / neighbours / random) | cuda.generic best us | "
          "gemm timed (errors) | best cuda.gemm config |")
    print("| --- | --- | --- | --- | --- |")
    for row in table:
        g = row["gemm_best"][0] if row["gemm_best"] else None
        fmt = lambda v: f"{v:.2f}" if v is not None else "-"  # noqa: E731
        print(f"| {describe(row['workload'])} | {fmt(g['us'] if g else None)} "
              f"({fmt(row['seed']['best_us'])} / {fmt(row['neighbour']['best_us'])} / "
              f"{fmt(row['random']['best_us'])}) | {fmt(row['generic']['best_us'])} | "
              f"{sum(row[r]['timed'] for r in ROLES[:3])} "
              f"({sum(row[r]['errors'] for r in ROLES[:3])}) | "
              f"{json.dumps(g['config']) if g else '-'} |")
    peers = peer_timings(batch, table, args) if args.peers else None
    if args.json:
        args.json.write_text(json.dumps({"rows": table, "peers": peers}, indent=1))


def describe(w: dict) -> str:
    return w["op"] + "(" + ", ".join(f"{k}={v}" for k, v in w.items()
                                     if k not in ("op", "dtype")) + ")"


def peer_timings(batch, table: list, args) -> list:
    """The ``--top`` fastest ``cuda.gemm`` kernels and the fastest ``cuda.generic`` one of each
    workload, timed again beside PyTorch FP32 (cuBLAS, TF32 off), interleaved over
    ``--rounds`` rounds, each a CUDA graph of enough calls to last ``--min-ms``."""
    import torch

    from bench_cuda_peers import calls_for, flops, time_torch, torch_op
    from tensortune.device_runner.backends import CupyBackend
    from tensortune.device_runner.batch import load_data, module_file

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    backend = CupyBackend()
    by_index = {c.index: c for c in batch.candidates}
    rows = []
    for row in table:
        spec = batch.data[row["data"]]
        host, ref = load_data(spec)
        # (the fake backend's output; a no-op on CuPy)
        backend.expect(ref, spec.output.stride, len(host))
        dev = [backend.upload(a) for a in host]
        picks = [("gemm", b["index"]) for b in row["gemm_best"]]
        if row["generic"]["best"]:
            picks.append(("generic", row["generic"]["best"][0]["index"]))
        ours = []
        for role, index in picks:
            c = by_index[index]
            with module_file(c.module) as path:
                handle = backend.load(path, [k.name for k in c.kernels])
            out = backend.zeros(spec.output.shape, spec.output.dtype)
            buffers = [*dev, out, *(backend.zeros((n,), dt) for n, dt in c.scratch)]
            backend.launch(handle, c.kernels, buffers)
            backend.synchronize()
            got = backend.download(out).reshape(-1)[::spec.output.stride]
            ok = bool(np.allclose(got, ref.reshape(-1), rtol=spec.rtol, atol=spec.atol))
            ours.append({"role": role, "index": index, "cand": c, "handle": handle,
                         "buffers": buffers, "ok": ok, "times": []})
        fn = torch_op(row["workload"], [torch.from_numpy(a).cuda() for a in host])
        torch_times = []
        for _ in range(args.rounds):
            for o in ours:
                if o["ok"]:
                    one = backend.time(o["handle"], o["cand"].kernels, o["buffers"], 1)
                    o["times"].append(backend.time(o["handle"], o["cand"].kernels, o["buffers"],
                                                   calls_for(one, args.min_ms)))
            one = time_torch(fn, 1)
            torch_times.append(time_torch(fn, calls_for(one, args.min_ms)))
        cublas = statistics.median(torch_times)
        entry = {"workload": row["workload"], "cublas_fp32_us": cublas * 1e6, "kernels": []}
        for o in ours:
            t = statistics.median(o["times"]) if o["times"] else math.nan
            entry["kernels"].append({"role": o["role"], "index": o["index"], "ok": o["ok"],
                                     "us": t * 1e6, "vs_cublas": t / cublas,
                                     "tflops": flops(row["workload"]) / t / 1e12,
                                     "config": o["cand"].record["config"]})
        rows.append(entry)
    print(f"\ndevice: {backend.device_name()} ({backend.arch()}); torch {torch.__version__}; "
          f"{args.rounds} interleaved rounds, medians, CUDA graphs")
    print("| workload | kernel | us | cuBLAS FP32 us | time / cuBLAS | TFLOP/s | correct |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for e in rows:
        for k in e["kernels"]:
            print(f"| {describe(e['workload'])} | {k['role']} #{k['index']} | {k['us']:.2f} | "
                  f"{e['cublas_fp32_us']:.2f} | {k['vs_cublas']:.3f} | {k['tflops']:.2f} | "
                  f"{k['ok']} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="build the batch (here)")
    ex.add_argument("--out", required=True)
    ex.add_argument("--random", type=int, default=300, help="random configs per workload")
    ex.add_argument("--seeds", type=int, default=64, help="seeds per workload at most")
    ex.add_argument("--generic", type=int, default=4, help="cuda.generic configs per workload")
    ex.add_argument("--emulate", type=int, default=6,
                    help="besides every seed, this many candidates per workload run on the CPU "
                         "emulator first (0: none, seeds neither)")
    ex.add_argument("--workloads", default=",".join(WORKLOADS),
                    help=f"comma-separated, of {', '.join(WORKLOADS)}")
    ex.add_argument("--neighbours", type=Path, nargs="*", default=[],
                    help="reports of earlier rounds: their best configs, K sliced")
    ex.add_argument("--workers", type=int, default=2)
    ex.add_argument("--seed", type=int, default=0)
    rp = sub.add_parser("report", help="summarize a timed batch (on the GPU host)")
    rp.add_argument("batch")
    rp.add_argument("--top", type=int, default=3)
    rp.add_argument("--peers", action="store_true",
                    help="time the best kernels again beside PyTorch's cuBLAS (FP32)")
    rp.add_argument("--rounds", type=int, default=7)
    rp.add_argument("--min-ms", type=float, default=2.0)
    rp.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.cmd == "export":
        export(args)
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_cuda_peers
        report(args)


if __name__ == "__main__":
    main()
