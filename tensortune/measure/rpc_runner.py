"""``RPCRunner``: times built candidates on a device reached through a TVM RPC tracker.

A sibling of ``LocalRunner`` with the same ``run`` contract. It works in one persistent worker
process (so a hung remote call is cut off by the pool's timeout, like a hung local kernel),
which holds one RPC session for as long as it works: candidates and batches share it, not one
session per candidate (MetaSchedule's costly habit); a broken or timed-out session is dropped
and the tracker asked for a new one.
Each candidate's library is uploaded, loaded, run on the local runner's inputs and timed by
the remote ``time_evaluator``; its output is copied back and checked against the same numpy
reference. The device's name is in every result.

Failures, by whose they are:

- the tracker or every server is unreachable: infrastructure, not the candidate's. Retried
  (the tracker may hand out another server) with a pause; after ``MeasureSettings.device_retries`` more tries the
  runner raises ``DeviceUnavailable``, and the candidate is neither recorded nor charged (a resumed run
  measures it again);
- the session breaks while a candidate runs (the server died or rebooted): the candidate is
  retried once on a fresh session; if it breaks that one too it is recorded as
  ``device_error``, the device's own kind of error, and tuning goes on;
- a hang: the candidate is cut off after ``run_timeout_s`` and recorded as ``timeout``.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import socket
import time
import uuid
from dataclasses import dataclass

from ..settings import MeasureSettings
from .model_timing import LIBRARY, model_arrays, time_main
from .pool import JobFailure, WorkerPool
from .runner import (MODEL_TIMEOUT_S, _data, _load_runtime, _prepacked, _to_result, evaluator,
                     timing_job)
from .types import BuildResult, ErrorKind, MeasureInput, MeasureResult

UNAVAILABLE, LOST = "unavailable", "lost"  # worker replies that are not a candidate's result


class DeviceUnavailable(RuntimeError):
    """No RPC server could be reached for a device after all retries."""


@dataclass(frozen=True)
class RPCDevice:
    """A device behind a TVM RPC tracker: ``key`` is what its servers registered with."""

    tracker_host: str
    tracker_port: int
    key: str
    priority: int = 1
    session_timeout_s: float = 600.0

    @property
    def name(self) -> str:
        return f"rpc:{self.key}@{self.tracker_host}:{self.tracker_port}"

    @staticmethod
    def parse(spec: str) -> "RPCDevice":
        """``HOST:PORT:KEY`` (``rpc:`` prefix optional); ``ValueError`` naming the problem."""
        body = spec[4:] if spec.startswith("rpc:") else spec
        parts = body.split(":")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"RPC device {spec!r}: expected HOST:PORT:KEY")
        host, port, key = parts
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"RPC device {spec!r}: port {port!r} is not a TCP port")
        return RPCDevice(host, int(port), key)


class RPCRunner:
    """Times candidates on ``device`` through its tracker, one at a time (module docstring)."""

    def __init__(self, device: RPCDevice, settings: MeasureSettings, seed: int = 0,
                 retries: int | None = None, retry_pause_s: float | None = None):
        self.device = device
        self.settings = settings
        self.seed = seed
        # None: the settings' device_retries and device_retry_pause_s
        self.retries = settings.device_retries if retries is None else retries
        self.retry_pause_s = (settings.device_retry_pause_s if retry_pause_s is None
                              else retry_pause_s)
        self._pool = WorkerPool(1, initializer=functools.partial(_load_runtime, settings.threads))
        self._token = uuid.uuid4().hex  # the worker's session belongs to this runner

    def run(self, inputs: list[MeasureInput], builds: list[BuildResult],
            verify: list[bool] | None = None) -> list[MeasureResult]:
        """One result per input; raises ``DeviceUnavailable`` when the device cannot be had."""
        s = self.settings
        if verify is None:
            verify = [s.verify == "all"] * len(inputs)
        results = []
        for inp, build, check in zip(inputs, builds, verify, strict=True):
            if build.error is not ErrorKind.NONE:
                results.append(MeasureResult((), build.error, build.message, build_s=build.build_s,
                                             timestamp=time.time(), device=self.device.name,
                                             detail=build.detail))
                continue
            job = {"device": self.device.__dict__, "session": self._token, "path": build.path,
                   "workload": inp.task.workload.to_dict(), "seed": self.seed,
                   "prepack": build.prepack, **timing_job(inp, s), "verify": bool(check),
                   "rtol": s.rtol, "atol": s.atol, "threads": s.threads}
            results.append(self._time(job, build.build_s))
        return results

    def _time(self, job: dict, build_s: float) -> MeasureResult:
        s = self.settings
        run_s, lost, unavailable = 0.0, 0, 0
        while True:
            start = time.perf_counter()
            (reply,) = self._pool.map(_run_remote, [job], s.run_timeout_s)
            run_s += time.perf_counter() - start
            kind = reply.kind if isinstance(reply, JobFailure) else reply[0]
            if kind == UNAVAILABLE:
                unavailable += 1
                if unavailable > self.retries:
                    raise DeviceUnavailable(f"{self.device.name}: no server after "
                                            f"{unavailable} tries: {reply[3]}")
                time.sleep(self.retry_pause_s * unavailable)
                continue
            if kind == LOST:
                lost += 1
                if lost < 2:
                    continue  # a fresh session (the worker drops the broken one) and once more
                reply = (ErrorKind.DEVICE_ERROR.value, (), False,
                         f"the device's session broke twice while running it: {reply[3]}", None)
            return _with_device(_to_result(reply, build_s, run_s, s.run_timeout_s),
                                self.device.name)

    def time_model(self, directory: str, repeat: int, min_repeat_ms: int) -> tuple[float, ...]:
        """A whole saved model (``model_timing``) uploaded to the device and timed there;
        ``DeviceUnavailable`` when no server can be had, ``RuntimeError`` when it fails."""
        job = {"device": self.device.__dict__, "session": self._token,
               "directory": str(directory), "repeat": repeat, "min_repeat_ms": min_repeat_ms,
               "threads": self.settings.threads}
        for attempt in range(1 + self.retries):
            (reply,) = self._pool.map(_time_model_remote, [job], MODEL_TIMEOUT_S)
            if isinstance(reply, JobFailure):
                raise RuntimeError(f"{self.device.name}: timing the model failed: "
                                   f"{reply.message}")
            kind, costs, why = reply
            if kind == ErrorKind.NONE.value:
                return costs
            if kind != UNAVAILABLE:
                raise RuntimeError(f"{self.device.name}: timing the model failed: {why}")
            time.sleep(self.retry_pause_s * (attempt + 1))
        raise DeviceUnavailable(f"{self.device.name}: no server after {1 + self.retries} "
                                f"tries: {why}")

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> "RPCRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _with_device(result: MeasureResult, name: str) -> MeasureResult:
    return dataclasses.replace(result, device=name)


_SESSION: dict = {}  # worker process: {"token": runner's token, "remote": RPCSession}


def _session(job: dict):
    """The worker's session for ``job``'s runner, opened through the tracker if need be."""
    from tvm import rpc

    if _SESSION.get("token") != job["session"]:
        _SESSION.clear()
        d = job["device"]
        # TVM retries a refused tracker connection for a minute, past the run's time limit,
        # which would charge every candidate a timeout: a down tracker must fail fast
        with socket.create_connection((d["tracker_host"], d["tracker_port"]), timeout=5):
            pass
        tracker = rpc.connect_tracker(d["tracker_host"], d["tracker_port"])
        # the tracker would queue a request for a key with no free server until one appears
        queue = tracker.summary().get("queue_info", {}).get(d["key"], {})
        if not queue.get("free", 0):
            raise ConnectionError(f"the tracker has no free server for key {d['key']!r}")
        remote = tracker.request(d["key"], priority=d["priority"],
                                 session_timeout=d["session_timeout_s"], max_retry=1)
        # the server's kernels get the threads the candidates were compiled for, as local
        # timing does (its runtime would otherwise take its default, half the logical CPUs)
        remote.get_function("runtime.config_threadpool")(1, int(job.get("threads") or 0))
        _SESSION.update(token=job["session"], remote=remote, modules={})
    return _SESSION["remote"]


def _run_remote(job: dict):
    """Worker side: ``(error kind, costs, verified, message, None)``, or ``(UNAVAILABLE |
    LOST, (), False, why, None)`` when the device, not the candidate, failed."""
    import numpy as np
    import tvm

    from ..workload import workload_from_dict

    workload = workload_from_dict(job["workload"])
    inputs, reference, out_shape = _data(workload, job["seed"])
    try:
        remote = _session(job)
    except Exception as err:  # tracker down, no free server, refused connection
        _SESSION.clear()
        return UNAVAILABLE, (), False, _first_line(err), None
    try:
        lib = _SESSION["modules"].get(job["path"])
        if lib is None:
            # once per library and session: uploading over a library the server has loaded
            # (a candidate timed again to verify it) would change the mapped file under it
            remote.upload(job["path"])
            lib = _SESSION["modules"][job["path"]] = remote.load_module(
                os.path.basename(job["path"]))
        dev = remote.cpu()
        args = [tvm.runtime.tensor(x, dev) for x in inputs]
        if job.get("prepack"):
            args = _prepacked(lib, args, job["prepack"], dev)
        out = tvm.runtime.tensor(np.zeros(out_shape, workload.dtype), dev)
        for _ in range(job["warmup"]):
            lib["main"](*args, out)
        timer = evaluator(lib, dev, job)
        costs = tuple(float(c) for c in timer(*args, out).results)
        if not job["verify"]:
            return ErrorKind.NONE.value, costs, False, "", None
        out = tvm.runtime.tensor(np.zeros(out_shape, workload.dtype), dev)
        lib["main"](*args, out)
        got = out.numpy()
    except Exception as err:
        if not _session_broke(err) and _alive(remote):  # the candidate failed, not the device
            return ErrorKind.RUNTIME_ERROR.value, (), False, _first_line(err)[:300], None
        _SESSION.clear()  # the session broke: the server died, rebooted or hung up
        return LOST, (), False, _first_line(err), None
    if not np.allclose(got, reference, rtol=job["rtol"], atol=job["atol"]):
        error = float(np.max(np.abs(got.astype(np.float64) - reference)))
        return (ErrorKind.WRONG_RESULT.value, costs, False, f"max abs error {error:.3g} vs reference",
                None)
    return ErrorKind.NONE.value, costs, True, "", None


def _time_model_remote(job: dict):
    """Worker side of ``RPCRunner.time_model``: ``(error kind, costs, why)``; UNAVAILABLE
    when no session could be had, LOST when it broke (a fresh one is tried next)."""
    from pathlib import Path

    try:
        remote = _session(job)
    except Exception as err:
        _SESSION.clear()
        return UNAVAILABLE, (), _first_line(err)
    try:
        # a name of its own: a server keeps a loaded library mapped
        name = f"model-{uuid.uuid4().hex[:12]}.so"
        remote.upload(str(Path(job["directory"]) / LIBRARY), name)
        costs = time_main(remote.load_module(name), remote.cpu(),
                          model_arrays(job["directory"]), job["repeat"], job["min_repeat_ms"])
        return ErrorKind.NONE.value, costs, ""
    except Exception as err:
        if _session_broke(err) or not _alive(remote):
            _SESSION.clear()
            return UNAVAILABLE, (), _first_line(err)
        return ErrorKind.RUNTIME_ERROR.value, (), _first_line(err)


def _session_broke(err: BaseException) -> bool:
    """Whether ``err`` says the RPC session itself failed (TVM reports a server that went
    away as an ``InternalError`` about a ``kShutdown`` reply, or as an ``RPCError``)."""
    import tvm

    text = str(err)
    return (isinstance(err, (tvm.error.RPCError, tvm.error.RPCSessionTimeoutError,
                             ConnectionError, EOFError))
            or any(s in text for s in ("kShutdown", "Connection reset", "Broken pipe",
                                       "connection closed", "Socket")))


def _alive(remote) -> bool:
    """Whether ``remote`` still answers a trivial call."""
    try:
        return bool(remote.cpu().exist)
    except Exception:
        return False


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"
