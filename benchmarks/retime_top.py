"""Re-time a task's best recorded configs warm and with the weights flushed (cold), in
interleaved rounds: how far the recorded best is from the others (``results-confirm-ab-zen4-10.txt``).

    .venv/bin/python benchmarks/retime_top.py RUN_DIR/log.jsonl FUNCTION_NAME 12
"""
import json
import os
import sys
import tempfile

os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np
import tvm
from tensortune.records import load_records
from tensortune.measure.builder import LocalBuilder
from tensortune.measure import launcher
from tensortune.measure.runner import _prepacked

log, name, top = sys.argv[1], sys.argv[2], int(sys.argv[3])
recs = [r for r in load_records(log) if r.ok]
run = json.load(open(os.path.join(os.path.dirname(log), "run.json")))
key = next(t["key"] for t in run["tasks"] if t["name"].split("#")[0] == name)
mine = sorted([r for r in recs if r.task_key == key], key=lambda r: r.cost)
seen, pick = set(), []
for r in mine:
    k = json.dumps(r.config.to_json(), sort_keys=True)
    if k not in seen:
        seen.add(k); pick.append(r)
    if len(pick) == top: break
print(name, len(mine), "records; top recorded us:", [round(r.cost*1e6,1) for r in pick])
with LocalBuilder(workers=2, timeout_s=120, workdir=tempfile.mkdtemp()) as b:
    builds = b.build([r.to_input() for r in pick])
dev = tvm.cpu()
wl = pick[0].workload
inputs = wl.random_inputs(0)
libs = []
for r, bres in zip(pick, builds):
    if not bres.path:
        print("build failed", bres.message); libs.append(None); continue
    fn = tvm.runtime.load_module(bres.path)
    launcher.install(bres.path)
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    if bres.prepack:
        args = _prepacked(fn, args, bres.prepack, dev)
    out = tvm.runtime.tensor(np.zeros(wl.output_shape, wl.dtype), dev)
    fn["main"](*args, out)
    libs.append((fn, args, out))
warm = [[] for _ in pick]; cold = [[] for _ in pick]
for rnd in range(5):
    for i, L in enumerate(libs):
        if L is None: continue
        fn, args, out = L
        t = fn.time_evaluator("main", dev, number=5, repeat=3, min_repeat_ms=50)(*args, out).results
        warm[i] += list(t)
        t = fn.time_evaluator("main", dev, number=1, repeat=15, f_preproc="cache_flush_cpu_non_first_arg")(*args, out).results
        cold[i] += list(t)
print(f"{'#':>2} {'recorded':>9} {'warm':>9} {'cold':>9}  config")
for i, r in enumerate(pick):
    if libs[i] is None: continue
    print(f"{i:2d} {r.cost*1e6:9.1f} {np.median(warm[i])*1e6:9.1f} {np.median(cold[i])*1e6:9.1f}  {r.config.to_json()}")
