"""Whole tuned models on a GPU, end to end, against PyTorch eager and torch.compile.

``prepare`` (on the tuning machine, TVM installed) builds a zoo model for a CUDA target, each
task with its best record in ``--records`` (none: dlight's default schedules, the untuned
build), and exports it (``Session.export``): library, weights or a synthetic-weights recipe,
test vector, loader. ``runtime`` collects TVM's runtime for the GPU host's Python once.

``run`` (on the GPU host: numpy, torch, the exported directories and that runtime; no TVM
installed, no compiler) checks each export against its test vector, rebuilds the zoo model in
PyTorch from its seed (when the export holds the real weights, PyTorch's output must match the
test vector too), then times, interleaved over ``--rounds`` rounds, batch 1: tensortune (the
VM's ``main`` on device-resident inputs), PyTorch eager FP32 (TF32 off: the arithmetic of
tensortune's kernels), eager TF32 (reference only), and torch.compile FP32. Each round runs an
engine back to back for about ``--round-ms`` and synchronizes; the per-round means' median is
reported.

    python benchmarks/bench_cuda_e2e.py prepare mobilenet_v2|NET.onnx --out DIR [--records LOG]
        [--synthetic-weights SEED] [--no-cuda-graph] [--home DIR]
    python benchmarks/bench_cuda_e2e.py runtime --out RT [--python 3.12] --like DIR
    python benchmarks/bench_cuda_e2e.py run DIR [DIR ...] --runtime RT [--rounds 7]
        [--no-compile] [--peer-script NAME=benchmarks/usernet_NAME.py] [--json OUT]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


# -- the tuning machine ----------------------------------------------------------------------
def prepare(args) -> None:
    import dataclasses

    from tensortune.session import Session
    from tensortune.settings import Settings
    from tensortune.workload import parse_target

    settings = Settings.from_env()
    settings = dataclasses.replace(settings, target=parse_target(args.target),
                                   **({"home": Path(args.home)} if args.home else {}))
    if args.model.endswith(".onnx"):  # a user's network: its own name is the file's stem
        session = Session.from_onnx(args.model, settings=settings)
    else:
        session = Session.from_zoo(args.model, image_size=args.image_size, settings=settings)
    start = time.perf_counter()
    session.build(best=None if args.records is None else str(args.records),
                  tuned=args.records is not None, cuda_graph=args.cuda_graph)
    built = time.perf_counter() - start
    session.save()
    manifest = session.export(args.out, overwrite=True, synthetic_seed=args.synthetic_weights)
    counts = {}
    for f in manifest["functions"]:
        counts[f["schedule"]] = counts.get(f["schedule"], 0) + 1
    print(json.dumps({"model": args.model, "out": str(args.out), "build_s": round(built, 1),
                      "cuda_graph": args.cuda_graph, "schedules": counts,
                      "sizes_mb": {k: round(v / 1e6, 2) for k, v in manifest["sizes"].items()},
                      "run_id": manifest["run_id"]}))


def runtime(args) -> None:
    from tensortune.deploy import collect_runtime

    like = Path(args.like)
    manifest = json.loads((like / "manifest.json").read_text())
    print(json.dumps(collect_runtime(args.out, like / manifest["library"],
                                     cuda=manifest["device"] == "cuda", python=args.python)))


# -- the GPU host --------------------------------------------------------------------------------
def _loader(directory: Path):
    spec = importlib.util.spec_from_file_location(f"predict_{directory.name}",
                                                  directory / "predict.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _timed(fn, sync, round_ms: float) -> tuple:
    """A callable timing one round: ``fn`` back to back for about ``round_ms``, synchronized;
    seconds per call."""
    fn()
    sync()
    start = time.perf_counter()
    fn()
    sync()
    per = max(time.perf_counter() - start, 1e-6)
    number = max(3, min(2000, int(round_ms / 1e3 / per)))

    def one_round() -> float:
        sync()
        begin = time.perf_counter()
        for _ in range(number):
            fn()
        sync()
        return (time.perf_counter() - begin) / number
    return one_round, number


def _script_module(path: str):
    """The ``torch.nn.Module`` a user's-network script (``benchmarks/usernet_*.py``) exports:
    the script is run with ``torch.onnx.export`` replaced by a catch, so the GPU host builds
    the same network from the same seed without exporting anything."""
    import runpy

    import torch

    caught = {}

    def catch(module, args, *rest, **kwargs):
        caught["module"] = module

    real, argv = torch.onnx.export, sys.argv
    torch.onnx.export, sys.argv = catch, [path, "unused.onnx"]
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        torch.onnx.export, sys.argv = real, argv
    if "module" not in caught:
        raise RuntimeError(f"{path} exported no module")
    return caught["module"]


def _torch_engines(name: str, xs: list, compile_: bool, dev: str, sync,
                   scripts: dict) -> dict:
    """PyTorch's engines for model ``name`` (a zoo model, or a user's network built by its
    script in ``scripts``) on inputs ``xs``: eager FP32, eager TF32 and torch.compile FP32
    (compiled once per model, whatever the number of exports timed)."""
    import torch

    if name in scripts:
        module = _script_module(scripts[name])
    else:
        from tensortune.zoo import zoo_model

        module, _ = zoo_model(name, image_size=int(xs[0].shape[-1]))
    module = module.to(dev).eval()
    xts = [torch.from_numpy(x).to(dev) for x in xs]

    def tf32(on: bool):
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on

    def caller(fn, on: bool):
        def call():
            tf32(on)
            with torch.no_grad():
                return fn(*xts)
        return call

    out = {"output": caller(module, False)().float().cpu().numpy(), "compile_s": None,
           "engines": {"pytorch_fp32": (caller(module, False), sync),
                       "pytorch_tf32": (caller(module, True), sync)}}
    if compile_:
        compiled = torch.compile(module)
        start = time.perf_counter()
        try:
            caller(compiled, False)()
        except Exception as err:  # a model torch.compile can't take still has eager's times
            out["compile_error"] = f"{type(err).__name__}: {str(err)[:300]}"
            print(json.dumps({"model": name, "torch_compile": out["compile_error"]}), flush=True)
            return out
        sync()
        out["compile_s"] = time.perf_counter() - start
        out["engines"]["torch_compile_fp32"] = (caller(compiled, False), sync)
    return out


def run(args) -> None:
    import torch

    rows, peers = [], {}
    # a CPU export runs here too (a dry run of this script on the tuning machine)
    on_gpu = torch.cuda.is_available()
    torch_dev = "cuda" if on_gpu else "cpu"
    torch_sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    for directory in map(Path, args.dirs):
        try:
            row = _time_export(directory, args, peers, torch_dev, torch_sync)
        except Exception as err:  # one export failing must not cost the others' timings
            row = {"export": str(directory), "error": f"{type(err).__name__}: {err}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    gpu = torch.cuda.get_device_name(0) if on_gpu else "none (CPU dry run)"
    print(f"\n# GPU: {gpu}; torch {torch.__version__}; batch 1, float32; {args.rounds} rounds")
    names = ["tensortune", "pytorch_fp32", "torch_compile_fp32", "pytorch_tf32"]
    print("| export | weights | " + " | ".join(f"{n} ms" for n in names)
          + " | eager FP32 / tensortune | torch.compile / tensortune |")
    print("|" + " --- |" * (len(names) + 4))
    for r in rows:
        if "error" in r:
            print(f"| {Path(r['export']).name} | failed: {r['error'][:120]} |")
            continue
        cells = [f"{r['ms'][n]:.3f}" if n in r["ms"] else "-" for n in names]
        ratio = (f"{r['ms']['torch_compile_fp32'] / r['ms']['tensortune']:.2f}x"
                 if "torch_compile_fp32" in r["ms"] else "-")
        print(f"| {Path(r['export']).name} | {r['weights']} | " + " | ".join(cells)
              + f" | {r['ms']['pytorch_fp32'] / r['ms']['tensortune']:.2f}x | {ratio} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": gpu, "torch": torch.__version__,
                                               "rows": rows}, indent=1))


def _time_export(directory: Path, args, peers: dict, torch_dev: str, torch_sync) -> dict:
    """Check one export, then time it interleaved with PyTorch's engines for its model."""
    predict = _loader(directory)
    start = time.perf_counter()
    model = predict.load(directory, runtime=args.runtime)
    load_s = time.perf_counter() - start
    manifest = model.manifest
    worst = model.check()
    with np.load(directory / manifest["check"]["file"]) as data:
        xs = [data["input:" + t["name"]] for t in model.inputs]
        expected = data["output:" + model.outputs[0]["name"]]
    name = manifest["name"]
    if name not in peers:
        peers[name] = _torch_engines(name, xs, args.compile, torch_dev, torch_sync,
                                     dict(p.split("=", 1) for p in args.peer_script))
    torch_side = peers[name]
    real = manifest["weights"].get("synthetic") is None
    torch_err = (float(np.max(np.abs(torch_side["output"] - expected))
                       / np.max(np.abs(expected))) if real else None)
    args_tvm = model._args(tuple(xs), {})
    main, dev = model._main, model.device
    engines = {"tensortune": (lambda: main(*args_tvm), dev.sync), **torch_side["engines"]}
    rounds = {name_: _timed(fn, sync, args.round_ms) for name_, (fn, sync) in engines.items()}
    samples = {name_: [] for name_ in engines}
    for _ in range(args.rounds):
        for name_, (one_round, _) in rounds.items():
            samples[name_].append(one_round())
    ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    spread = {k: (max(v) - min(v)) / statistics.median(v) for k, v in samples.items()}
    return {"export": str(directory), "model": name, "run_id": manifest["run_id"],
            "weights": "real" if real else "synthetic", "check_worst": worst,
            "torch_vs_check": torch_err, "load_s": load_s, "ms": ms, "spread": spread,
            "calls_per_round": {k: v[1] for k, v in rounds.items()},
            "torch_compile_s": torch_side["compile_s"], "schedules": _schedules(manifest)}


def _schedules(manifest: dict) -> dict:
    counts: dict = {}
    for f in manifest["functions"]:
        counts[f["schedule"]] = counts.get(f["schedule"], 0) + 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("model")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--target", default="cuda:sm_90")
    p.add_argument("--records", type=Path, default=None)
    p.add_argument("--synthetic-weights", type=int, default=None)
    p.add_argument("--no-cuda-graph", dest="cuda_graph", action="store_false",
                   help="launch the kernels one by one (default: replay them as a CUDA graph)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--home", default=None)
    p.set_defaults(func=prepare)
    p = sub.add_parser("runtime")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--like", required=True, help="an export whose library the runtime loads")
    p.add_argument("--python", default=None)
    p.set_defaults(func=runtime)
    p = sub.add_parser("run")
    p.add_argument("dirs", nargs="+")
    p.add_argument("--runtime", default=None, help="a runtime folder (`runtime` subcommand)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--round-ms", type=float, default=60.0)
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--peer-script", action="append", default=[], metavar="NAME=SCRIPT",
                   help="the PyTorch peer of export NAME (a user's network) is the module "
                        "SCRIPT exports (benchmarks/usernet_*.py)")
    p.add_argument("--json", default=None)
    p.set_defaults(func=run)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
