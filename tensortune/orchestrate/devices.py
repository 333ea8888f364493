"""Where stages run: the CPU cores that build and search, and the devices that time.

``--devices`` names the devices: ``local`` (this machine's CPU, shared with the builds, so a
measurement waits for the CPU to be idle), ``cores:N`` (the last N cores reserved for timing,
one kernel thread each; builds and searches are pinned to the others) and
``rpc:HOST:PORT:KEY[:llvm:MCPU]`` (a TVM RPC server behind a tracker, whose CPU is ``MCPU``;
this host's CPU when not named). A job's measurements go to the devices that can run its target
(``DeviceSpec.why_not``). ``Resources`` holds the tools: one builder pinned to the build cores,
one runner per device.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import socket
from dataclasses import dataclass

from ..measure import LocalBuilder, LocalRunner
from ..measure.rpc_runner import RPCDevice, RPCRunner
from ..settings import Settings
from ..workload import device_reason, parse_target, target_key


@dataclass(frozen=True)
class DeviceSpec:
    """One device as named on the command line."""

    kind: str  # "local", "cores" or "rpc"
    cores: int = 0
    rpc: RPCDevice | None = None
    cpu: str = ""  # an RPC device's LLVM mcpu; "" is this host's CPU

    def why_not(self, target: dict) -> str:
        """Why this device cannot run code compiled for ``target`` ('' when it can)."""
        return _why_not(self.cpu, target_key(target))

    @property
    def name(self) -> str:
        if self.kind == "cores":
            return f"cores:{self.cores}"
        return self.rpc.name if self.rpc else "local"

    @staticmethod
    def parse(spec: str) -> "DeviceSpec":
        """``local``, ``cores:N`` or ``rpc:HOST:PORT:KEY``; anything else is refused by name."""
        spec = spec.strip()
        if spec == "local":
            return DeviceSpec("local")
        if spec.startswith("cores:"):
            text = spec.split(":", 1)[1]
            if not text.isdigit() or int(text) < 1:
                raise ValueError(f"device {spec!r}: cores:N needs a positive whole N")
            return DeviceSpec("cores", cores=int(text))
        if spec.startswith("rpc:"):
            parts = spec.split(":")
            cpu = ""
            if len(parts) > 4:
                kind, _, cpu = ":".join(parts[4:]).partition(":")
                if kind != "llvm" or not cpu:
                    raise ValueError(f"device {spec!r}: an RPC device's CPU is named llvm:MCPU "
                                     "(e.g. llvm:znver3)")
                parse_target(f"llvm:{cpu}")  # refuses a CPU LLVM does not know, by name
            return DeviceSpec("rpc", rpc=RPCDevice.parse(":".join(parts[:4])), cpu=cpu)
        raise ValueError(f"unknown device {spec!r}; use local, cores:N or "
                         "rpc:HOST:PORT:KEY[:llvm:MCPU]")


@functools.lru_cache(maxsize=256)
def _why_not(cpu: str, target: str) -> str:
    # asked at every dispatch of a measurement: LLVM's answer is kept
    return device_reason(json.loads(target), {"kind": "llvm", "mcpu": cpu} if cpu else None)


def parse_devices(text: str) -> list[DeviceSpec]:
    """A comma-separated ``--devices`` list; at most one local CPU device (local or cores:N)."""
    specs = [DeviceSpec.parse(part) for part in text.split(",") if part.strip()]
    if not specs:
        raise ValueError("no device given; use local, cores:N or rpc:HOST:PORT:KEY[:llvm:MCPU]")
    if sum(s.kind in ("local", "cores") for s in specs) > 1:
        raise ValueError("at most one of local and cores:N: they are the same CPU")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"a device is named twice in {text!r}")
    return specs


@dataclass(frozen=True)
class Layout:
    """Which cores build and search (``cpus``) and which each device times on."""

    cpus: tuple[int, ...]
    devices: tuple[tuple[DeviceSpec, tuple[int, ...]], ...]

    @staticmethod
    def plan(specs: list[DeviceSpec], cores: tuple[int, ...] | None = None) -> "Layout":
        """Reserve the last N usable cores for a ``cores:N`` device, the rest for building."""
        cores = tuple(sorted(cores if cores is not None else os.sched_getaffinity(0)))
        devices, free = [], list(cores)
        for spec in specs:
            if spec.kind == "cores":
                if spec.cores >= len(free):
                    raise ValueError(f"cores:{spec.cores} leaves no core to build on: this "
                                     f"process may use {len(cores)} core(s)")
                devices.append((spec, tuple(free[-spec.cores:])))
                free = free[:-spec.cores]
            else:
                devices.append((spec, ()))
        return Layout(tuple(free), tuple(devices))

    def threads(self, default: int) -> int:
        """Threads candidates are compiled and timed for: a ``cores:N`` device's N, else
        ``default`` (the whole local CPU, or what a remote device is assumed to have)."""
        return next((len(cpus) for spec, cpus in self.devices if spec.kind == "cores"), default)


@dataclass
class Device:
    """A device at run time: its runner, and whether timing on it needs the whole CPU idle
    (``local``: the builds share its cores)."""

    name: str
    runner: object
    exclusive_cpu: bool = False
    busy: bool = False
    down: str = ""  # why it was taken out (an RPC server gone), or ""
    spec: DeviceSpec | None = None  # None: runs any target (a test's device)

    def why_not(self, target: dict | None) -> str:
        """Why this device cannot time ``target``'s code ('' when it can, or no target)."""
        return "" if target is None or self.spec is None else self.spec.why_not(target)


def why_none_serves(devices: list[Device], target: dict | None) -> str:
    """'' when a device of ``devices`` can time ``target``'s code, else why none can, naming
    each device."""
    reasons = [f"{d.name}: {d.why_not(target)}" for d in devices]
    if target is None or any(r.endswith(": ") for r in reasons):
        return ""
    what = target.get("mcpu") or target.get("arch") or target.get("kind")
    return f"no device of this service can time code for {what} ({'; '.join(reasons)})"


class Resources:
    """The builder and the devices of a scheduler, created from a ``Layout``; closes them."""

    def __init__(self, layout: Layout, settings: Settings, pin: bool = True):
        m = settings.measure
        self.settings = settings
        self.layout = layout
        self.cpu_capacity = max(1, len(layout.cpus))
        reserved = any(spec.kind == "cores" for spec, _ in layout.devices)
        build_cpus = layout.cpus if (pin and reserved) else None
        self.builder = LocalBuilder(min(m.build_workers, self.cpu_capacity) if reserved
                                    else m.build_workers, m.build_timeout_s, cpus=build_cpus)
        self.devices: list[Device] = []
        for spec, cpus in layout.devices:
            if spec.kind == "rpc":
                runner = RPCRunner(spec.rpc, m, seed=settings.seed)
            else:
                runner = LocalRunner(m, seed=settings.seed, cpus=cpus if pin and cpus else None)
            self.devices.append(Device(spec.name, runner, exclusive_cpu=spec.kind == "local",
                                       spec=spec))

    def private_tools(self) -> tuple:
        """A builder and a runner of a job's own, on all cores, as a separate process of
        today's would have (the ``concurrent`` policy); its kernels get the threads the jobs'
        candidates are compiled for (a ``cores:N`` device's N), so policies compare alike."""
        m = self.settings.measure
        m = dataclasses.replace(m, threads=self.layout.threads(m.threads))
        return (LocalBuilder(m.build_workers, m.build_timeout_s),
                LocalRunner(m, seed=self.settings.seed))

    def nodes(self) -> list[dict]:
        """The machines builds run on: this one."""
        return [{"name": socket.gethostname(), "address": "local", "cpus": self.cpu_capacity,
                 "alive": True, "driver": True}]

    def close(self) -> None:
        self.builder.close()
        for d in self.devices:
            d.runner.close()


def open_resources(devices: str, settings: Settings, use_ray: bool = False,
                   ray_address: str | None = None) -> tuple[Layout, "Resources"]:
    """The layout of ``--devices`` and its resources: local ones, or with ``use_ray`` (or a
    ``ray_address``) builds as Ray tasks and devices as Ray actors (``ray_backend``)."""
    layout = Layout.plan(parse_devices(devices))
    if use_ray or ray_address:
        from .ray_backend import RayResources

        return layout, RayResources(layout, settings, address=ray_address)
    return layout, Resources(layout, settings)
