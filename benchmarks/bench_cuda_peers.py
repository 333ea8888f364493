"""tensortune's CUDA kernels against PyTorch (cuDNN / cuBLAS) on the same GPU, in one run.

Runs on the GPU host (numpy, CuPy, PyTorch; no TVM). The batch is an exported one, usually
``tensortune measure export WORKLOADS --best K``: each workload's best tuned configs. Every
candidate and the PyTorch op of its workload are checked against the numpy reference, then timed
the same way, interleaved over ``--rounds`` rounds: CUDA events around one replay of a CUDA
graph holding enough back-to-back calls to last ``--min-ms`` (so no launch overhead is timed).
PyTorch runs in strict FP32 (TF32 off), the arithmetic of tensortune's kernels, both with
cuDNN's autotuner and with its heuristics, and is credited with the faster; TF32 times are
reported beside, for reference only.

    python benchmarks/bench_cuda_peers.py BATCH_DIR [--rounds 7] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tensortune.device_runner.backends import CupyBackend  # noqa: E402
from tensortune.device_runner.batch import load_batch, load_data, read_results  # noqa: E402


def torch_op(workload: dict, torch_inputs: list):
    """The PyTorch call computing ``workload`` on ``torch_inputs``."""
    import torch
    import torch.nn.functional as F

    op = workload["op"]
    if op == "conv2d":
        x, w = torch_inputs
        return lambda: F.conv2d(x, w, stride=workload["stride"], padding=workload["padding"],
                                dilation=workload["dilation"], groups=workload["groups"])
    if op == "matmul":
        a, b = torch_inputs
        return lambda: torch.matmul(a, b)
    if op == "dense":
        return lambda: F.linear(*torch_inputs)
    raise SystemExit(f"no PyTorch peer for op {op!r}")


def flops(w: dict) -> float:
    if w["op"] == "conv2d":
        span = lambda size, k: (size + 2 * w["padding"] - w["dilation"] * (k - 1) - 1) // w["stride"] + 1
        oh, ow = span(w["h"], w["kh"]), span(w["w"], w["kw"])
        return 2.0 * w["n"] * w["filters"] * oh * ow * (w["c"] // w["groups"]) * w["kh"] * w["kw"]
    if w["op"] == "matmul":
        return 2.0 * w["m"] * w["n"] * w["k"]
    if w["op"] == "dense":
        return 2.0 * w["batch"] * w["in_features"] * w["out_features"]
    return math.nan


def time_torch(fn, number: int) -> float:
    """Seconds per call: one replay of a graph of ``number`` calls, between CUDA events."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # cuDNN's autotuner picks its algorithm outside the capture
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(number):
            fn()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / number


def calls_for(seconds_one: float, min_ms: float) -> int:
    return max(1, min(100_000, math.ceil(min_ms / 1e3 / max(seconds_one, 1e-7))))


def fastest(cands: list, results: Path, k: int) -> list:
    """The ``k`` candidates the device runner timed fastest (all of them without results)."""
    cost = {i: statistics.median(line["costs"]) for i, line in read_results(results).items()
            if line.get("error") == "none" and line.get("costs")}
    timed = sorted((c for c in cands if c.index in cost), key=lambda c: cost[c.index])
    return timed[:k] or cands[:k]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("batch")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-ms", type=float, default=2.0)
    ap.add_argument("--top", type=int, default=0,
                    help="with the device runner's results.jsonl in the batch: per workload only "
                         "the K fastest there (0: every candidate)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import torch

    torch.backends.cudnn.benchmark = True
    backend = CupyBackend()
    device = f"{backend.device_name()} ({backend.arch()})"
    batch = load_batch(args.batch)
    manifest = json.loads((Path(args.batch) / "manifest.json").read_text())
    rows = {}
    for name, spec in batch.data.items():
        host, ref = load_data(spec)
        cands = [c for c in batch.candidates if c.data == name]
        if args.top:
            cands = fastest(cands, Path(args.batch) / "results.jsonl", args.top)
        workload = cands[0].record["task"]["workload"]
        dev_inputs = [backend.upload(a) for a in host]
        out = backend.zeros(spec.output.shape, spec.output.dtype)
        t_inputs = [torch.from_numpy(a).cuda() for a in host]
        fn = torch_op(workload, t_inputs)
        checked = {}
        for tf32 in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
            got = fn().cpu().numpy()
            checked[tf32] = float(np.max(np.abs(got.astype(np.float64) - ref)))
        ours = []
        for c in cands:
            handle = backend.load(str(c.module), [k.name for k in c.kernels])
            buffers = [*dev_inputs, out]
            backend.launch(handle, c.kernels, buffers)
            backend.synchronize()
            err = float(np.max(np.abs(backend.download(out).astype(np.float64) - ref)))
            ok = np.allclose(backend.download(out), ref, rtol=spec.rtol, atol=spec.atol)
            ours.append({"cand": c, "handle": handle, "buffers": buffers, "err": err, "ok": ok,
                         "times": []})
        rows[name] = {"workload": workload, "fn": fn, "ours": ours, "torch": [],
                      "torch_heuristic": [], "torch_tf32": [],
                      "torch_err": checked[False], "torch_tf32_err": checked[True]}

    for r in range(args.rounds):  # interleaved: a clock or neighbour drift hits all alike
        for name, row in rows.items():
            for o in row["ours"]:
                if not o["ok"]:
                    continue
                one = backend.time(o["handle"], o["cand"].kernels, o["buffers"], 1)
                n = calls_for(one, args.min_ms)
                o["times"].append(backend.time(o["handle"], o["cand"].kernels, o["buffers"], n))
            for tf32, bench, key in ((False, True, "torch"), (False, False, "torch_heuristic"),
                                     (True, True, "torch_tf32")):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                torch.backends.cudnn.allow_tf32 = tf32
                torch.backends.cudnn.benchmark = bench
                one = time_torch(row["fn"], 1)
                row[key].append(time_torch(row["fn"], calls_for(one, args.min_ms)))

    table = []
    for name, row in rows.items():
        timed = [o for o in row["ours"] if o["times"]]
        best = min(timed, key=lambda o: statistics.median(o["times"])) if timed else None
        ours_s = statistics.median(best["times"]) if best else math.nan
        # cuDNN's autotuner (benchmark mode) sometimes picks a slower algorithm than its
        # heuristics: PyTorch is credited with the faster of the two
        autotuned = statistics.median(row["torch"])
        heuristic = statistics.median(row["torch_heuristic"])
        torch_s = min(autotuned, heuristic)
        tf32_s = statistics.median(row["torch_tf32"])
        f = flops(row["workload"])
        table.append({
            "workload": manifest["data"][name].get("describe", name), "op": row["workload"]["op"], "workload_spec": row["workload"],
            "tensortune_us": ours_s * 1e6, "torch_fp32_us": torch_s * 1e6,
            "torch_tf32_us": tf32_s * 1e6, "speedup_vs_torch_fp32": torch_s / ours_s,
            "torch_fp32_autotuned_us": autotuned * 1e6, "torch_fp32_heuristic_us": heuristic * 1e6,
            "tensortune_tflops": f / ours_s / 1e12, "torch_fp32_tflops": f / torch_s / 1e12,
            "tensortune_max_abs_err": best["err"] if best else None,
            "torch_fp32_max_abs_err": row["torch_err"], "torch_tf32_max_abs_err": row["torch_tf32_err"],
            "candidates": len(row["ours"]), "verified": sum(o["ok"] for o in row["ours"]),
            "config": best["cand"].record["config"] if best else None,
            "spread_tensortune": (max(best["times"]) / min(best["times"]) - 1) if best else None,
            "spread_torch": max(row["torch"]) / min(row["torch"]) - 1,
        })
    print(f"device: {device}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; "
          f"{args.rounds} interleaved rounds; medians; CUDA graphs "
          f"{'on' if backend.graphs else 'off (capture refused)'}")
    print("| workload | tensortune us | PyTorch FP32 us (autotuned / heuristic) | speed-up | "
          "tensortune TFLOP/s | PyTorch FP32 TFLOP/s | PyTorch TF32 us (reference) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for t in table:
        print(f"| {t['workload']} | {t['tensortune_us']:.2f} | {t['torch_fp32_us']:.2f} "
              f"({t['torch_fp32_autotuned_us']:.2f} / {t['torch_fp32_heuristic_us']:.2f}) | "
              f"{t['speedup_vs_torch_fp32']:.2f}x | {t['tensortune_tflops']:.2f} | "
              f"{t['torch_fp32_tflops']:.2f} | {t['torch_tf32_us']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"device": device, "torch": torch.__version__,
                                         "cudnn": torch.backends.cudnn.version(),
                                         "rounds": args.rounds, "graphs": backend.graphs,
                                         "ts": time.time(), "rows": table}, indent=1))


if __name__ == "__main__":
    main()
