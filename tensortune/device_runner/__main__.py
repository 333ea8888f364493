"""``python -m tensortune.device_runner DIR`` (run a batch) or ``--serve`` (HTTP server)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from .backends import BACKENDS, make_backend
from .batch import BatchError
from .runner import RunnerError, run_batch, run_worker


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tensortune.device_runner",
                                description="Time the CUDA kernels of an exported batch.")
    p.add_argument("dir", nargs="?", help="batch directory (with manifest.json)")
    p.add_argument("--backend", choices=BACKENDS, default="cupy")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds per candidate (default: the manifest's timing.timeout_s)")
    p.add_argument("--out", default=None, metavar="FILE", help="results file (default DIR/results.jsonl)")
    p.add_argument("--serve", action="store_true", help="serve batches over HTTP instead")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--workdir", default=None, help="where uploaded batches are unpacked")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    return p


def _summary_line(s: dict) -> str:
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(s["counts"].items())) or "nothing run"
    return (f"{s['candidates']} candidates: {counts} ({s['resumed']} resumed, {s['workers']} workers) "
            f"in {s['seconds']:.1f} s on {s['device'] or 'no device'} -> {s['results']}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.probe:
        backend = make_backend(args.backend)
        print(json.dumps({"device": backend.device_name(), "arch": backend.arch()}), flush=True)
        return 0
    if args.serve:
        from .server import serve

        serve(args.host, args.port, args.workdir, args.backend)
        return 0
    if not args.dir:
        print("error: give a batch directory, or --serve", file=sys.stderr)
        return 2
    if args.worker:
        out = args.out or os.path.join(args.dir, "results.jsonl")
        code = run_worker(args.dir, args.backend, out)
        sys.stdout.flush()
        # skip interpreter teardown: freeing memory in a broken CUDA context can hang
        os._exit(code)
    try:
        summary = run_batch(args.dir, backend=args.backend, timeout_s=args.timeout, out=args.out)
    except BatchError as e:
        print(f"error: bad batch: {e}", file=sys.stderr)
        return 2
    except RunnerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(_summary_line(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
