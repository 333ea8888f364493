"""Where stages run: the CPU cores that build and search, and the devices that time.

``--devices`` names the devices: ``local`` (this machine's CPU, shared with the builds, so a
measurement waits for the CPU to be idle), ``cores:N`` (the last N cores reserved for timing,
one kernel thread each; builds and searches are pinned to the others) and
``rpc:HOST:PORT:KEY`` (a TVM RPC server behind a tracker). ``Resources`` holds the tools: one
builder pinned to the build cores, one runner per device.
"""
from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass

from ..measure import LocalBuilder, LocalRunner
from ..measure.rpc_runner import RPCDevice, RPCRunner
from ..settings import Settings


@dataclass(frozen=True)
class DeviceSpec:
    """One device as named on the command line."""

    kind: str  # "local", "cores" or "rpc"
    cores: int = 0
    rpc: RPCDevice | None = None

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
            return DeviceSpec("rpc", rpc=RPCDevice.parse(spec))
        raise ValueError(f"unknown device {spec!r}; use local, cores:N or rpc:HOST:PORT:KEY")


def parse_devices(text: str) -> list[DeviceSpec]:
    """A comma-separated ``--devices`` list; at most one local CPU device (local or cores:N)."""
    specs = [DeviceSpec.parse(part) for part in text.split(",") if part.strip()]
    if not specs:
        raise ValueError("no device given; use local, cores:N or rpc:HOST:PORT:KEY")
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
            self.devices.append(Device(spec.name, runner, exclusive_cpu=spec.kind == "local"))

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
                 "alive": True}]

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
