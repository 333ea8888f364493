"""Did a restructuring change what tuning does? Run this under two commits and compare.

For each of ``bench_ops.py``'s operators and each tuner, tune with a fixed seed twice: once on
a replayed timer (a config's cost is a hash of the config: no noise, so the same code must
propose the same configs in the same order) and, with ``--real``, on this machine. Prints one
JSON line per run: the digest of the config sequence, the best replayed cost, the real best.

    PYTHONPATH=<checkout> python benchmarks/bench_refactor.py [--trials 96] [--real 64]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

from tensortune.measure import BuildResult, MeasureResult
from tensortune.settings import Settings
from tensortune.tuner.api import tune_stages, tune_task
from tensortune.tuner.stages import drive
from tensortune.workload import Conv2d, Dense, Matmul, Task, default_target

OPERATORS = {  # bench_ops.py's
    "c7": Conv2d(n=1, c=128, h=28, w=28, filters=256, kh=3, kw=3, stride=2, padding=1),
    "c12": Conv2d(n=1, c=512, h=7, w=7, filters=512, kh=3, kw=3, stride=1, padding=1),
    "matmul": Matmul(m=512, n=512, k=512),
    "dense": Dense(batch=128, in_features=768, out_features=3072),
}
TUNERS = (("xgb", "sa"), ("xgb", "ga"), ("random", "sa"))


class _Builder:
    def build(self, inputs, *args, **kwargs):
        return [BuildResult(path="replayed.so", build_s=0.0) for _ in inputs]


class _Replay:
    """A config's cost: a fixed function of its knob values (1-2 ms)."""

    def __init__(self):
        self.configs = []

    def run(self, inputs, builds, verify=None):
        out = []
        for inp in inputs:
            self.configs.append(inp.config.to_json())
            blob = json.dumps(inp.config.to_json(), sort_keys=True).encode()
            cost = 1e-3 * (1 + int(hashlib.sha1(blob).hexdigest()[:8], 16) / 0xFFFFFFFF)
            out.append(MeasureResult((cost,), verified=True, build_s=0.0,
                                     timestamp=time.time()))
        return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=96, help="replayed trials per run")
    ap.add_argument("--real", type=int, default=0, help="real trials per operator (xgb, sa)")
    args = ap.parse_args(argv)
    settings = Settings()
    target = default_target(settings.measure.threads)
    for name, workload in OPERATORS.items():
        task = Task(workload, target, "cpu.generic")
        for tuner, search in TUNERS:
            runner = _Replay()
            result = drive(tune_stages(task, args.trials, tuner, None, settings, search=search),
                           _Builder(), runner)
            digest = hashlib.sha1(json.dumps(runner.configs, sort_keys=True).encode())
            print(json.dumps({"op": name, "tuner": tuner, "search": search, "timer": "replayed",
                              "trials": len(runner.configs), "sequence": digest.hexdigest()[:12],
                              "best_ms": result.best_cost * 1e3}), flush=True)
        if args.real:
            start = time.perf_counter()
            result = tune_task(task, args.real, "xgb", None, settings)
            print(json.dumps({"op": name, "tuner": "xgb", "search": "sa", "timer": "real",
                              "trials": args.real, "best_ms": result.best_cost * 1e3,
                              "gflops": workload.flops / result.best_cost / 1e9,
                              "tune_s": time.perf_counter() - start}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
