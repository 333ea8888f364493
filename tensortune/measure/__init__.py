"""Measurement: build candidates into libraries and time them, surviving crashes and hangs."""
from .builder import LocalBuilder
from .pool import JobFailure, WorkerPool
from .rpc_runner import DeviceUnavailable, RPCDevice, RPCRunner
from .runner import LocalRunner, Runner, use_threads
from .types import BuildResult, ErrorKind, MeasureInput, MeasureResult

__all__ = ["ErrorKind", "MeasureInput", "BuildResult", "MeasureResult", "LocalBuilder",
           "LocalRunner", "RPCRunner", "RPCDevice", "DeviceUnavailable", "Runner", "WorkerPool",
           "JobFailure", "use_threads"]
