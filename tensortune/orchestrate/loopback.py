"""A fleet on one machine: TVM RPC servers behind a tracker, and a Ray cluster of a head and
more nodes started with ``ray start``, all on loopback. What the tests and
``benchmarks/bench_cluster.py`` stand for many machines with; also a way to try
``serve --ray-address`` before a real cluster.

Each Ray node declares one device's resource (``ray_backend.resource_name``), so that device's
actor lives on it; every node but the head is kept as its ``ray start --block`` process, so
one node can be stopped alone (``stop_node``), as a machine leaving the cluster would.

Node ``i`` (the head is 0) listens on 127.0.0.``i+2`` (Linux answers on all of 127/8; Ray
would put the machine's address in place of 127.0.0.1, for every node alike). Were the nodes
on one address, a driver joining the cluster would attach to whichever node Ray found first
at it, and when that node left, the actors the driver owns would die with it, the head's
included. A driver must still claim the head's address (``ray_backend.driver_ip`` does, for
``RayResources``; a script of your own: ``ray.init(address, _node_ip_address=HEAD)``): left to
guess, Ray takes the address the last node to start recorded for the machine.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .devices import DeviceSpec
from .ray_backend import resource_name


class RPCPool:
    """A tracker on ``port`` and one RPC server per key (``rpc:127.0.0.1:PORT:KEY`` each)."""

    def __init__(self, keys: tuple[str, ...], port: int = 9900, server_port: int = 9951):
        from tvm import rpc
        from tvm.rpc.tracker import Tracker

        self.tracker = Tracker(host="127.0.0.1", port=port, port_end=port + 50, silent=True)
        self.servers = {}
        for key in keys:
            self.servers[key] = rpc.Server(host="127.0.0.1", port=server_port,
                                           port_end=server_port + 48,
                                           tracker_addr=("127.0.0.1", self.tracker.port),
                                           key=key, silent=True)
            self.wait_free(key)

    def device(self, key: str) -> str:
        return f"rpc:127.0.0.1:{self.tracker.port}:{key}"

    def wait_free(self, key: str, timeout_s: float = 30.0) -> None:
        from tvm import rpc

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            queue = rpc.connect_tracker("127.0.0.1", self.tracker.port).summary()["queue_info"]
            if queue.get(key, {}).get("free", 0):
                return
            time.sleep(0.2)
        raise TimeoutError(f"no free RPC server for {key} after {timeout_s} s")

    def kill(self, key: str) -> None:
        """SIGKILL one server and the processes it started (its sessions run in children)."""
        import psutil

        root = psutil.Process(self.servers[key].proc._proc.pid)
        for p in root.children(recursive=True) + [root]:
            p.kill()

    def close(self) -> None:
        for server in self.servers.values():
            server.terminate()
        self.tracker.terminate()


class RayNodes:
    """A Ray head and more nodes on loopback, one CPU each, node ``i`` declaring the device
    ``devices[i]`` (a ``--devices`` entry) on address ``ips[i]``. ``address`` (the head's) is
    what ``--ray-address`` takes."""

    def __init__(self, devices: list[str], port: int, cpus: int = 1, timeout_s: float = 180):
        self.ray = str(Path(sys.executable).with_name("ray"))
        self.env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
        self.env.pop("RAY_ADDRESS", None)
        if len(devices) > 253:
            raise ValueError("a loopback cluster has at most 253 nodes (127.0.0.2 to .254)")
        self.ips = [f"127.0.0.{i + 2}" for i in range(len(devices))]  # the head's first
        self.address = f"{self.ips[0]}:{port}"
        common = [f"--num-cpus={cpus}", "--disable-usage-stats"]
        subprocess.run([self.ray, "start", "--head", f"--port={port}",
                        f"--node-ip-address={self.ips[0]}", "--include-dashboard=false",
                        _resources(devices[0]), *common],
                       env=self.env, check=True, capture_output=True, timeout=timeout_s)
        self.nodes = [subprocess.Popen([self.ray, "start", f"--address={self.address}",
                                        "--block", f"--node-ip-address={ip}", _resources(d),
                                        *common], env=self.env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       start_new_session=True)
                      for ip, d in zip(self.ips[1:], devices[1:])]
        self.wait_nodes(len(devices), timeout_s)

    def wait_nodes(self, count: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out = subprocess.run([self.ray, "status", f"--address={self.address}"],
                                 env=self.env, capture_output=True, text=True).stdout
            if out.count("node_") >= count:
                return
            time.sleep(1)
        raise TimeoutError(f"the Ray cluster at {self.address} did not reach {count} nodes")

    def stop_node(self, index: int) -> None:
        """Stop node ``index`` (1 is the first after the head) and what runs on it."""
        proc = self.nodes[index - 1]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)

    def close(self) -> None:
        for i in range(1, len(self.nodes) + 1):
            self.stop_node(i)
        subprocess.run([self.ray, "stop", "--force"], env=self.env, capture_output=True,
                       timeout=120)


def _resources(device: str) -> str:
    return "--resources=" + json.dumps({resource_name(DeviceSpec.parse(device).name): 1})
