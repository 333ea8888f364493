"""The scheduler's build and measure stages on Ray Core (seed 002; ``tensortune[cluster]``).

``RayResources`` stands where ``devices.Resources`` does: a build becomes Ray tasks (one CPU
each, one per build core), each compiling its share with a ``LocalBuilder`` and sending the
libraries back as bytes; every device is one Ray actor holding the one-unit custom resource
``device:<name>``, so measurements on a device never overlap, whichever driver asks. Jobs,
search and records stay in the driver; Ray's serialization carries only our own objects.
"""
from __future__ import annotations

import atexit
import dataclasses
import ipaddress
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from ..measure.builder import LocalBuilder
from ..measure.pool import first_line
from ..measure.rpc_runner import DeviceUnavailable, RPCRunner
from ..measure.runner import LocalRunner
from ..measure.types import BuildResult, ErrorKind, MeasureInput, MeasureResult
from ..settings import Settings
from .devices import Device, DeviceSpec, Layout

try:
    import ray
except ImportError:  # an optional extra: only this backend needs it
    ray = None


def _need_ray():
    if ray is None:
        raise ImportError("the Ray backend needs Ray: pip install tensortune[cluster]")
    return ray


def resource_name(device: str) -> str:
    """The custom resource that a node offering ``device`` declares, with capacity 1."""
    return f"device:{device}"


def driver_ip(address: str) -> str | None:
    """The node address a driver joining ``address`` claims, which picks the raylet it attaches
    to: the address's own host when that is a loopback IP that Ray takes as given (any of
    127/8 but 127.0.0.1, which Ray, like ``localhost`` and ``::1``, replaces with the machine's
    address), else None: Ray's guess.

    A driver lives and dies with the node it attaches to, and so do the actors it owns (every
    device actor): were it attached to a node that then leaves, the actors on all the others
    would die too. Ray attaches it to the first live node at the address it claims, guessed
    from what the last node started on this machine recorded; on one machine with several
    nodes (``loopback.RayNodes``: the head on 127.0.0.2, the others on 127.0.0.3, ...) that is
    not the head, so the driver claims the head's address itself."""
    host = address.rsplit(":", 1)[0].strip("[]") if "://" not in address else ""
    if host in ("127.0.0.1", "::1", "localhost"):
        return None
    try:
        return host if ipaddress.ip_address(host).is_loopback else None
    except ValueError:  # a host name, "auto", a ray:// client address: Ray decides
        return None


def node_label(node: dict) -> str:
    """A Ray node (an entry of ``ray.nodes()``) as events name it: its name (an address, by
    default) and the start of its id, since nodes on one machine may share the address."""
    name = node.get("NodeName") or node.get("NodeManagerAddress") or "?"
    return f"{name}/{node.get('NodeID', '')[:8]}"


def _write(directory: str, data: bytes) -> str:
    """``data`` as a fresh library file in ``directory``; its path."""
    path = os.path.join(directory, f"{uuid.uuid4().hex}.so")
    with open(path, "wb") as f:
        f.write(data)
    return path


# -- worker side ---------------------------------------------------------------------------------

_BUILDERS: dict = {}  # Ray worker process: its LocalBuilder, kept so TVM is imported once


def _build_chunk(inputs: list[MeasureInput], limit, cpus) -> list:
    """A Ray task: ``(BuildResult, library bytes or None)`` per input. The bytes travel back
    because the driver's machine need not share a filesystem with this one."""
    if cpus not in _BUILDERS:
        # one worker: the task holds one Ray CPU; its pool still isolates crashes and hangs
        _BUILDERS[cpus] = LocalBuilder(1, cpus=cpus)
        atexit.register(_BUILDERS[cpus].close)
    out, node = [], ray.get_runtime_context().get_node_id()
    for build in _BUILDERS[cpus].build(inputs, limit):
        build = dataclasses.replace(build, node=node)
        data = None
        if build.path:
            with open(build.path, "rb") as f:
                data = f.read()
            os.remove(build.path)
        out.append((build, data))
    return out


class DeviceActor:
    """A Ray actor timing on one device with a ``LocalRunner`` (pinned to the device's reserved
    cores, if any) or an ``RPCRunner``; Ray runs its calls one at a time."""

    def __init__(self, spec: DeviceSpec, cpus: tuple[int, ...], settings: Settings):
        m = settings.measure
        if spec.kind == "rpc":
            self.runner = RPCRunner(spec.rpc, m, seed=settings.seed)
        else:
            self.runner = LocalRunner(m, seed=settings.seed, cpus=cpus or None)
        self.dir = tempfile.mkdtemp(prefix="tensortune-ray-device-")
        self.spans: list[tuple[float, float]] = []

    def run(self, inputs, builds, libs, verify):
        """The runner's results for ``builds`` whose libraries are ``libs`` (bytes or None)."""
        start, paths, local = time.time(), [], []
        try:
            for build, data in zip(builds, libs, strict=True):
                if data is not None:
                    paths.append(_write(self.dir, data))
                    build = dataclasses.replace(build, path=paths[-1])
                local.append(build)
            return self.runner.run(inputs, local, verify)
        finally:
            for path in paths:  # loaded libraries stay mapped; the file is no longer needed
                os.remove(path)
            self.spans.append((start, time.time()))

    def time_model(self, files: dict[str, bytes], repeat: int, min_repeat_ms: int):
        """A whole saved model, its files sent as bytes (the node may be another machine),
        timed by the runner."""
        directory = tempfile.mkdtemp(dir=self.dir)
        try:
            for name, data in files.items():
                with open(os.path.join(directory, name), "wb") as f:
                    f.write(data)
            return self.runner.time_model(directory, repeat, min_repeat_ms)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def history(self) -> list[tuple[float, float]]:
        """When each ``run`` began and ended (wall clock): what shows they never overlap."""
        return list(self.spans)

    def close(self) -> None:
        self.runner.close()
        shutil.rmtree(self.dir, ignore_errors=True)


_REMOTE: dict = {}


def _remote(name: str):
    """The Ray-wrapped task or actor class, made on first use (so importing this module does
    not need Ray)."""
    if not _REMOTE:
        r = _need_ray()
        _REMOTE["build"] = r.remote(num_cpus=1)(_build_chunk)
        _REMOTE["actor"] = r.remote(num_cpus=0)(DeviceActor)  # its resource is the device's
    return _REMOTE[name]


# -- driver side ---------------------------------------------------------------------------------

def _split(items: list, parts: int) -> list[list]:
    """``items`` in at most ``parts`` contiguous chunks of near-equal size, in order."""
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    bounds = [i * size + min(i, extra) for i in range(parts + 1)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:])]


class RayBuilder:
    """Builds a batch as ``chunks`` Ray tasks; libraries land in this driver's own temporary
    directory. Failures are results, never exceptions, as with ``LocalBuilder``."""

    def __init__(self, chunks: int, timeout_s: float, cpus: tuple[int, ...] | None = None):
        self.chunks, self.timeout_s, self.cpus = chunks, timeout_s, cpus
        self.workdir = tempfile.mkdtemp(prefix="tensortune-ray-build-")
        self._labels: dict[str, str] = {}  # Ray node id -> ``node_label``

    def build(self, inputs: list[MeasureInput], limit=None) -> list[BuildResult]:
        """As ``LocalBuilder.build``; each chunk tightens ``limit`` on its own builds."""
        parts = _split(list(inputs), self.chunks) if inputs else []
        task = _remote("build")
        refs = [task.remote(part, limit or self.timeout_s, self.cpus) for part in parts]
        out: list[BuildResult] = []
        for part, ref in zip(parts, refs):
            try:
                pairs = ray.get(ref)
            except Exception as err:  # a lost worker or node: its candidates fail, the run goes on
                why = f"Ray build task failed: {_why(err)}"
                out.extend(BuildResult(None, 0.0, ErrorKind.COMPILE_ERROR, why) for _ in part)
                continue
            for build, data in pairs:
                build = dataclasses.replace(build, node=self._label(build.node))
                if data is not None:
                    build = dataclasses.replace(build, path=_write(self.workdir, data))
                out.append(build)
        return out

    def _label(self, node_id: str) -> str:
        if node_id not in self._labels:  # a node that joined since: ask the cluster again
            self._labels.update({n["NodeID"]: node_label(n) for n in ray.nodes()})
        return self._labels.get(node_id, node_id[:8])

    def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


class RayDeviceRunner:
    """The driver's runner for one device actor: sends each library's bytes along."""

    def __init__(self, name: str, actor, owned: bool = True):
        self.name, self.actor, self.owned = name, actor, owned

    def run(self, inputs, builds, verify=None) -> list[MeasureResult]:
        libs = [_read(b) for b in builds]
        return self._get(self.actor.run.remote(list(inputs), list(builds), libs, verify))

    def time_model(self, directory: str, repeat: int, min_repeat_ms: int) -> tuple[float, ...]:
        """A whole saved model timed by the device's actor, wherever its node is."""
        files = {p.name: p.read_bytes() for p in Path(directory).iterdir() if p.is_file()}
        return self._get(self.actor.time_model.remote(files, repeat, min_repeat_ms))

    def _get(self, ref):
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as err:
            # the actor (or its node) is gone: infrastructure, so the scheduler takes the device
            # out and the batch waits for another, uncharged
            raise DeviceUnavailable(f"{self.name}: its Ray actor died: {_why(err)}") from None
        except ray.exceptions.RayTaskError as err:
            if isinstance(err.cause, DeviceUnavailable):
                raise DeviceUnavailable(str(err.cause)) from None
            raise

    def close(self) -> None:
        if not self.owned:  # a job's private view of a shared actor
            return
        try:
            ray.get(self.actor.close.remote(), timeout=30)
        except Exception:  # already dead: nothing left to close
            pass
        ray.kill(self.actor)


def _why(err: BaseException) -> str:
    """The first line of what failed: a task's own exception rather than Ray's banner."""
    cause = getattr(err, "cause", None)
    return first_line(cause if isinstance(cause, BaseException) else err)


def _read(build: BuildResult) -> bytes | None:
    """A built library's bytes; None for a failed build or a missing file (whose candidate the
    actor's runner then fails, as a local one would)."""
    if build.error is not ErrorKind.NONE or not build.path:
        return None
    try:
        with open(build.path, "rb") as f:
            return f.read()
    except OSError:
        return None


class RayResources:
    """``devices.Resources`` on Ray: ``address=None`` starts a local cluster (or uses the one
    this process has already started), else connects to ``address``. Every device of
    ``layout`` needs a node declaring ``device:<name>`` with capacity exactly 1. ``close``
    ends Ray only if this object called ``ray.init``."""

    def __init__(self, layout: Layout, settings: Settings, address: str | None = None):
        r = _need_ray()
        self.layout, self.settings = layout, settings
        names = [resource_name(spec.name) for spec, _ in layout.devices]
        self._started = not r.is_initialized()
        if self._started:
            if address is None:
                r.init(num_cpus=max(1, len(layout.cpus)), resources={n: 1 for n in names},
                       include_dashboard=False)
            else:
                r.init(address=address, _node_ip_address=driver_ip(address))
        try:
            have = r.cluster_resources()
            for n in names:
                if have.get(n, 0) != 1:
                    # 0: the actor would wait forever; 2 or more: measurements could overlap
                    raise ValueError(
                        f"the Ray cluster offers {have.get(n, 0):g} of resource {n!r}; exactly "
                        f"one node must declare it with 1 unit (ray start --resources="
                        f"'{{\"{n}\": 1}}')")
        except BaseException:
            self._shutdown()
            raise
        # a local cluster runs on the cores the layout planned; a remote one's ids mean nothing
        local = address is None
        reserved = any(spec.kind == "cores" for spec, _ in layout.devices)
        self.cpu_capacity = (max(1, len(layout.cpus)) if self._started and local
                             else max(1, int(have.get("CPU", 1))))
        self._build_cpus = tuple(layout.cpus) if (local and reserved) else None
        self.builder = RayBuilder(self.cpu_capacity, settings.measure.build_timeout_s,
                                  self._build_cpus)
        actor = _remote("actor")
        self.devices: list[Device] = []
        for spec, cpus in layout.devices:
            handle = actor.options(resources={resource_name(spec.name): 1}).remote(
                spec, tuple(cpus) if local else (), settings)
            self.devices.append(Device(spec.name, RayDeviceRunner(spec.name, handle),
                                       exclusive_cpu=spec.kind == "local", spec=spec))

    def nodes(self) -> list[dict]:
        """The Ray cluster's nodes: where build tasks may run; ``driver`` marks the one this
        process is attached to (its actors die if that node leaves)."""
        mine = ray.get_runtime_context().get_node_id()
        return [{"name": node_label(n), "address": n.get("NodeManagerAddress", "?"),
                 "cpus": int(n.get("Resources", {}).get("CPU", 0)), "alive": bool(n.get("Alive")),
                 "driver": n.get("NodeID") == mine}
                for n in ray.nodes()]

    def private_tools(self) -> tuple:
        """A job's own builder and a view of the first device (the ``concurrent`` policy); a
        second actor could never be placed: the device's one unit is taken."""
        return (RayBuilder(self.cpu_capacity, self.settings.measure.build_timeout_s,
                           self._build_cpus),
                RayDeviceRunner(self.devices[0].name, self.devices[0].runner.actor, owned=False))

    def close(self) -> None:
        self.builder.close()
        for d in self.devices:
            d.runner.close()
        self._shutdown()

    def _shutdown(self) -> None:
        if self._started and ray.is_initialized():
            ray.shutdown()
            self._started = False
