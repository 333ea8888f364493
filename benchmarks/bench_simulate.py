"""Past this machine by simulation: real schedule runs replayed on 1-64 build nodes and 1-32
devices (``tensortune schedule --simulate``).

Takes the output directories of real runs of the same jobs (``bench_schedule.py --out DIR``
writes ``DIR/<policy>``): the load-aware run's recorded stages are replayed on the resources it
ran on, under both policies, and each prediction is set beside the real run's makespan (the
sequential prediction beside the real sequential run, where one is given). Then the grid:
the makespan of both policies on every count of nodes and devices, as a table, one JSON line
and a plot (makespan against devices, one line per node count, per policy).

    python benchmarks/bench_simulate.py --run DIR/load-aware [--sequential DIR/sequential]
        [--nodes 1,2,4,8,16,32,64] [--devices 1,2,4,8,16,32] [--plot docs/plots/simulate.png]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tensortune.orchestrate.simulate import SIM_POLICIES, load_traces, simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a load-aware schedule run's directory")
    ap.add_argument("--sequential", help="a sequential run of the same jobs, to check against")
    ap.add_argument("--nodes", default="1,2,4,8,16,32,64")
    ap.add_argument("--devices", default="1,2,4,8,16,32")
    ap.add_argument("--cores-per-node", type=int, default=0, help="0: the recorded run's")
    ap.add_argument("--plot", help="write the plot here (PNG)")
    args = ap.parse_args()
    traces, cores, real = load_traces(args.run)
    recorded_devices = len({json.loads(line)["resource"] for line in
                            (Path(args.run) / "events.jsonl").read_text().splitlines()
                            if json.loads(line)["kind"] == "measure"})
    per_node = args.cores_per_node or cores
    print(f"{len(traces)} jobs from {args.run}: {real:.1f} s on {cores} build core(s) and "
          f"{recorded_devices} device(s)")
    checks = {"load-aware": real}
    if args.sequential:
        checks["sequential"] = load_traces(args.sequential)[2]
    print("\n| policy | real makespan s | replayed on the same resources s | error |\n"
          "|---|---|---|---|")
    fidelity = {}
    for policy, measured in checks.items():
        predicted = simulate(traces, 1, recorded_devices, cores, cores, policy).makespan_s
        fidelity[policy] = {"real_s": measured, "predicted_s": predicted,
                            "error": predicted / measured - 1}
        print(f"| {policy} | {measured:.1f} | {predicted:.1f} | {predicted / measured - 1:+.1%} |")
    nodes = [int(n) for n in args.nodes.split(",")]
    devices = [int(d) for d in args.devices.split(",")]
    grid = {p: {(n, d): simulate(traces, n, d, per_node, cores, p).makespan_s
                for n in nodes for d in devices} for p in SIM_POLICIES}
    print(f"\nsimulated makespan, s ({per_node} build core(s) a node)\n")
    print("| nodes | devices | " + " | ".join(SIM_POLICIES) + " |\n|---|---|" +
          "---|" * len(SIM_POLICIES))
    for n in nodes:
        for d in devices:
            print(f"| {n} | {d} | " + " | ".join(f"{grid[p][n, d]:.1f}" for p in SIM_POLICIES)
                  + " |")
    if args.plot:
        plot(grid, nodes, devices, per_node, Path(args.plot))
    print(json.dumps({"run": str(args.run), "recorded_cores": cores,
                      "recorded_devices": recorded_devices, "fidelity": fidelity,
                      "grid": [{"policy": p, "nodes": n, "devices": d, "makespan_s": round(v, 2)}
                               for p, g in grid.items() for (n, d), v in g.items()]}))


def plot(grid, nodes, devices, per_node: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(grid), figsize=(11, 4.2), sharey=True)
    for ax, (policy, values) in zip(axes, grid.items()):
        for n in nodes:
            ax.plot(devices, [values[n, d] for d in devices], marker="o", label=f"{n} node(s)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("devices")
        ax.set_title(policy)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("simulated makespan, s")
    axes[-1].legend(fontsize=8)
    fig.suptitle(f"recorded stages replayed on more build nodes ({per_node} cores each) "
                 "and devices")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
