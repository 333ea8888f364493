"""The tuning service under load: three models from three clients at once, a ``kill -9`` of
the server in the middle, the SLA short-cut, and the tuned modules against ONNX Runtime.

A fresh server (``tensortune serve``, its own home) takes the three models at once, each from
its own client thread. ``--kill-after`` seconds later the server is killed with SIGKILL (the
server process only, as a crash would) and started again; every job must finish. Then the
first model is submitted again with an SLA its tuned module already meets (the short-cut:
answered without a trial), and the fetched modules are timed against ONNX Runtime in this
process, interleaved (after the server has stopped).

    python benchmarks/bench_service.py [--models mobilenet_v2,squeezenet1_1,shufflenet_v2]
        [--trials 300] [--sla-vs-ort 1.0,none,1.2] [--kill-after 150] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import psutil

from tensortune.peers.models import export_onnx, onnxruntime_peer, time_interleaved
from tensortune.service.client import ServiceClient
from tensortune.tasks import CompiledModel
from tensortune.zoo import zoo_model

TOKEN = "bench-token-" + "0123456789abcdef"


class ServerProcess:
    def __init__(self, home: Path, port: int, args: tuple[str, ...] = ()):
        self.home, self.port, self.args = home, port, tuple(args)
        self.url = f"http://127.0.0.1:{port}"
        (home / "tokens").parent.mkdir(parents=True, exist_ok=True)
        (home / "tokens").write_text(TOKEN + "\n")
        self.proc = None

    def start(self) -> float:
        import socket

        with socket.socket() as probe:  # a server left over would answer in our place
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", self.port))
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tensortune", "serve", "--port", str(self.port),
             "--token-file", str(self.home / "tokens"), *self.args],
            env=dict(os.environ, TENSORTUNE_HOME=str(self.home)),
            stdout=open(self.home / "server.log", "ab"), stderr=subprocess.STDOUT)
        while True:
            try:
                if httpx.get(self.url + "/v1/health", timeout=2).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                time.sleep(0.3)
            if self.proc.poll() is not None:
                raise RuntimeError("the server exited; see " + str(self.home / "server.log"))

    def kill9(self) -> list[int]:
        """SIGKILL the server alone; returns its worker processes still alive 5 s later."""
        children = psutil.Process(self.proc.pid).children(recursive=True)
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        time.sleep(5)
        return [c.pid for c in children if c.is_running() and c.status() != "zombie"]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mobilenet_v2,squeezenet1_1,shufflenet_v2")
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--sla-vs-ort", default="1.0,none,1.2",
                    help="per model: its SLA as a multiple of ONNX Runtime's latency, or none")
    ap.add_argument("--kill-after", type=float, default=150.0)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--port", type=int, default=8479)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--retime", action="store_true", help="only time the modules an earlier "
                    "run left in --out against ONNX Runtime again (a quieter moment)")
    args = ap.parse_args()
    if args.retime:
        return retime(args.out, args.models.split(","), args.threads)
    names = args.models.split(",")
    factors = [None if f == "none" else float(f) for f in args.sla_vs_ort.split(",")]
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-service-"))
    out.mkdir(parents=True, exist_ok=True)

    paths, inputs, ort = {}, {}, {}
    for name in names:
        module, example = zoo_model(name)
        paths[name] = export_onnx(module, example, out / "models" / f"{name}.onnx")
        inputs[name] = [x.numpy() for x in example]
        ort[name] = onnxruntime_peer(paths[name], args.threads)
    before = time_interleaved({n: (lambda n=n: ort[n].run(inputs[n])) for n in names})
    ort_ms = {n: statistics.median(v) * 1e3 for n, v in before.items()}
    slas = {n: None if f is None else round(ort_ms[n] * f, 3) for n, f in zip(names, factors)}
    print("ONNX Runtime before:", {n: round(v, 3) for n, v in ort_ms.items()}, "SLAs:", slas)

    server = ServerProcess(out / "home", args.port)
    server.start()
    ids, results, errors = {}, {}, []
    t0 = time.time()

    def client(name):
        try:
            with ServiceClient(server.url, TOKEN) as c:
                ids[name] = c.submit(paths[name], sla_ms=slas[name], trials=args.trials)["id"]
        except Exception as err:
            errors.append(f"{name}: {err}")

    threads = [threading.Thread(target=client, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"submission failed: {errors}")
    time.sleep(args.kill_after)
    with ServiceClient(server.url, TOKEN) as c:
        at_kill = {n: c.job(i) for n, i in ids.items()}
    orphans = server.kill9()
    restart_s = server.start()
    print(f"killed at {time.time() - t0:.0f} s:",
          {n: (j["state"], j["trials_done"]) for n, j in at_kill.items()},
          f"workers left behind: {orphans}; restarted in {restart_s:.1f} s")
    with ServiceClient(server.url, TOKEN, timeout=120) as c:
        for name, job_id in ids.items():
            results[name] = c.wait(job_id, poll_s=2.0)
        ends = [_end_time(out / "home", i) for i in ids.values()]
        makespan = max(ends) - min(r["created"] for r in results.values())
        first = names[0]
        start = time.monotonic()
        again = c.submit(paths[first], sla_ms=round(results[first]["latency_ms"] * 1.05, 4))
        again = c.wait(again["id"], poll_s=0.1)
        shortcut_s = time.monotonic() - start
        for name, job_id in ids.items():
            if results[name]["state"] == "done":
                c.fetch(job_id, out / "artifacts" / name)
    server.stop()
    done = [n for n in names if results[n]["state"] == "done"]

    tuned = {n: CompiledModel.load(out / "artifacts" / n / "module", threads=args.threads)
             for n in done}
    for n in done:
        np.testing.assert_allclose(tuned[n].run(*inputs[n])[0], ort[n].run(inputs[n])[0],
                                   rtol=2e-3, atol=2e-3)
    fns = {}
    for n in done:
        fns[f"{n}/tensortune"] = lambda n=n: tuned[n].run(*inputs[n])
        fns[f"{n}/onnxruntime"] = lambda n=n: ort[n].run(inputs[n])
    after = {k: statistics.median(v) * 1e3 for k, v in time_interleaved(fns).items()}
    report(names, results, slas, after, makespan, at_kill, orphans, again, shortcut_s, out)


def retime(out: Path, names: list[str], threads: int) -> None:
    rows = {}
    for n in names:
        module = out / "artifacts" / n / "module"
        if not module.exists():
            continue
        tuned = CompiledModel.load(module, threads=threads)
        inputs = [x.numpy() for x in zoo_model(n)[1]]
        ort = onnxruntime_peer(out / "models" / f"{n}.onnx", threads)
        times = time_interleaved({"tensortune": lambda: tuned.run(*inputs),
                                  "onnxruntime": lambda: ort.run(inputs)}, rounds=9)
        rows[n] = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print("| model | tensortune ms | ONNX Runtime ms | ORT / tensortune |")
    print("| --- | --- | --- | --- |")
    for n, r in rows.items():
        print(f"| {n} | {r['tensortune']:.3f} | {r['onnxruntime']:.3f} | "
              f"{r['onnxruntime'] / r['tensortune']:.2f}x |")
    print(json.dumps({n: {k: round(v, 4) for k, v in r.items()} for n, r in rows.items()}))


def _end_time(home: Path, job_id: str) -> float:
    import sqlite3

    db = sqlite3.connect(home / "service.db")
    row = db.execute("SELECT max(t) FROM events WHERE job_id = ? AND kind IN ('done', "
                     "'failed')", (job_id,)).fetchone()
    db.close()
    return row[0]


def report(names, results, slas, after, makespan, at_kill, orphans, again, shortcut_s, out):
    print(f"\nmakespan (first submission to last job done, restart included): {makespan:.0f} s")
    print("| model | SLA ms | state | trials | at kill -9 | restarts | latency in service ms | "
          "SLA met | re-timed tensortune ms | ONNX Runtime ms | ORT / tensortune |")
    print("| --- " * 11 + "|")
    for n in names:
        r = results[n]
        if r["state"] != "done":
            print(f"| {n} | {slas[n] or '-'} | {r['state']}: {r['error'][:80]} |")
            continue
        tt, ort = after[f"{n}/tensortune"], after[f"{n}/onnxruntime"]
        print(f"| {n} | {slas[n] or '-'} | {r['state']} | {r['trials_done']}/{r['trials']} | "
              f"{at_kill[n]['state']} {at_kill[n]['trials_done']} | {r['restarts']} | "
              f"{r['latency_ms']:.3f} | {r['sla_met']} | {tt:.3f} | {ort:.3f} | "
              f"{ort / tt:.2f}x |")
    print(f"\nSLA short-cut: resubmitted {names[0]} with an SLA of {again['sla_ms']} ms: "
          f"{again['state']} in {shortcut_s:.2f} s, {again['trials_done']} trials "
          f"({again['note']})")
    print(f"worker processes alive 5 s after kill -9: {len(orphans)}")
    summary = {"makespan_s": round(makespan, 1), "shortcut_s": round(shortcut_s, 2),
               "orphans": len(orphans), "jobs": {n: {k: results[n][k] for k in (
                   "state", "trials_done", "trials", "latency_ms", "sla_ms", "sla_met",
                   "restarts", "note")} for n in names},
               "retimed_ms": {k: round(v, 4) for k, v in after.items()}, "out": str(out)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
