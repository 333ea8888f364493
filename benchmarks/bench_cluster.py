"""The service past one machine: the same three jobs on a two-node Ray cluster with two RPC
devices, and on a one-machine service, side by side.

A fleet on loopback (``orchestrate.loopback``): two TVM RPC servers behind a tracker, a Ray
head and a second node (one build CPU each, each declaring one device). A service on it
(``--ray-address``, ``--devices`` the two servers) takes three models at once; then a fresh
one-machine service (``--devices local``) takes the same three. For each job: its state, the
nodes its builds ran on and the devices it was measured on (from its events), its tuned
latency as each service timed it, and, after both have stopped, the two tuned modules timed
again here in interleaved rounds. With ``--kill`` one RPC server is killed and the second Ray
node stopped while the cluster's jobs run.

    python benchmarks/bench_cluster.py [--models squeezenet1_1,mobilenet_v2,shufflenet_v2]
        [--trials 96] [--kill] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bench_service import TOKEN, ServerProcess

from tensortune.peers.models import export_onnx, time_interleaved
from tensortune.service.client import ServiceClient
from tensortune.tasks import CompiledModel
from tensortune.zoo import zoo_model

KEYS = ("bench-a", "bench-b")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_service(home: Path, args: tuple, models: dict, trials: int, on_running=None) -> dict:
    """Three jobs at once on a fresh service; each job's view, events and fetched module."""
    server = ServerProcess(home, free_port(), args)
    server.start()
    results, t0 = {}, time.monotonic()

    def one(name):
        with ServiceClient(server.url, TOKEN) as c:
            job = c.submit(models[name], trials=trials)
            results[name] = c.wait(job["id"], poll_s=1.0, timeout_s=3600)

    threads = [threading.Thread(target=one, args=(n,)) for n in models]
    for t in threads:
        t.start()
    if on_running:
        on_running(server)
    for t in threads:
        t.join()
    makespan = time.monotonic() - t0
    out = {"makespan_s": makespan, "jobs": {}}
    with ServiceClient(server.url, TOKEN) as c:
        out["cluster"] = c.cluster()
        for name, view in results.items():
            events = c.events(view["id"])
            stages = [e["data"] for e in events if e["kind"] == "stage"]
            fetched = home / "fetched" / name
            if view["state"] == "done":
                c.fetch(view["id"], fetched)
            out["jobs"][name] = {
                "state": view["state"], "latency_ms": view["latency_ms"],
                "trials": view["trials_done"], "module": str(fetched / "module"),
                "build_nodes": sorted({n for s in stages if s["stage"] == "build"
                                       for n in s.get("nodes", [])}),
                "devices": sorted({s["resource"] for s in stages if s["stage"] == "measure"}),
                "device_down": [e["data"] for e in events if e["kind"] == "device_down"]}
    server.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="squeezenet1_1,mobilenet_v2,shufflenet_v2")
    ap.add_argument("--trials", type=int, default=96)
    ap.add_argument("--kill", action="store_true", help="kill an RPC server and stop the "
                    "second node while the cluster's jobs run")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    from tensortune.orchestrate.loopback import RayNodes, RPCPool

    out = args.out or Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    models, inputs = {}, {}
    for n in names:
        module, example = zoo_model(n)
        models[n] = export_onnx(module, example, out / "models" / f"{n}.onnx")
        inputs[n] = [x.numpy() for x in example]
    rpc = RPCPool(KEYS)
    nodes = RayNodes([rpc.device(KEYS[1]), rpc.device(KEYS[0])], port=free_port())

    def chaos(_server):
        time.sleep(60)
        rpc.kill(KEYS[0])
        nodes.stop_node(1)
        print("killed RPC server", KEYS[0], "and stopped the second Ray node", flush=True)

    try:
        devices = ",".join(rpc.device(k) for k in KEYS)
        runs = {"cluster": run_service(out / "cluster", ("--devices", devices, "--ray-address",
                                                         nodes.address), models, args.trials,
                                       chaos if args.kill else None)}
    finally:
        nodes.close()
        rpc.close()
    runs["one machine"] = run_service(out / "local", ("--devices", "local"), models, args.trials)
    report(runs, names, inputs, args)


def report(runs: dict, names: list[str], inputs: dict, args) -> None:
    fns, loaded = {}, {}
    for run, result in runs.items():
        for n in names:
            job = result["jobs"][n]
            if job["state"] == "done":
                loaded[run, n] = CompiledModel.load(job["module"], threads=2)
                fns[f"{run}/{n}"] = lambda m=loaded[run, n], x=inputs[n]: m.run(*x)
    retimed = {k: statistics.median(v) * 1e3 for k, v in
               time_interleaved(fns, rounds=9, per_round=10).items()}
    print(f"\n{args.models}, {args.trials} trials each" + (", chaos" if args.kill else ""))
    for run, result in runs.items():
        print(f"\n[{run}] makespan {result['makespan_s']:.0f} s; nodes "
              f"{[n['name'] + ('' if n['alive'] else ' (gone)') for n in result['cluster']['nodes']]}")
        print("| job | state | trials | build nodes | devices | service ms | retimed ms |")
        print("|---|---|---|---|---|---|---|")
        for n in names:
            j = result["jobs"][n]
            print(f"| {n} | {j['state']} | {j['trials']} | {', '.join(j['build_nodes']) or '-'} "
                  f"| {', '.join(j['devices'])} | {j['latency_ms'] or float('nan'):.3f} | "
                  f"{retimed.get(f'{run}/{n}', float('nan')):.3f} |")
    print("\n| job | cluster / one machine (service) | cluster / one machine (retimed) |")
    print("|---|---|---|")
    for n in names:
        a, b = runs["cluster"]["jobs"][n], runs["one machine"]["jobs"][n]
        svc = (a["latency_ms"] or float("nan")) / (b["latency_ms"] or float("nan"))
        again = retimed.get(f"cluster/{n}", float("nan")) / retimed.get(f"one machine/{n}",
                                                                         float("nan"))
        print(f"| {n} | {svc:.3f} | {again:.3f} |")
    print(json.dumps({"runs": {r: {k: v for k, v in res.items() if k != "cluster"}
                               for r, res in runs.items()}, "retimed_ms": retimed}))


if __name__ == "__main__":
    main()
