"""Time exported CUDA kernels on a GPU host that has only Python, numpy and CuPy.

Protocol: the exporter writes a batch directory (``manifest.json``, ``data/*.npz``,
``kernels/*.cubin`` or ``*.cubin.gz``; inputs may be generated from a seed, checked against
their sha256, and a large reference stored as a strided sample: ``batch``). ``run_batch``
checks the data, then supervises a worker process that, for each candidate,
prints ``start <index>``, checks one launch against the reference, times it with CUDA
events around a CUDA graph of back-to-back calls and appends one JSON line to ``results.jsonl``. A worker that hangs is killed
(``timeout``), one that dies or hits a CUDA error is restarted (``runtime_error``), and
a rerun resumes after the candidates already written. ``serve`` takes batches as a gzip
tar over HTTP (``POST /v1/batches``); ``run_remote`` sends one. Nothing here imports TVM
or any other part of tensortune.
"""
from .batch import Batch, BatchError, load_batch, read_results
from .client import RemoteError, device_info, pack_batch, run_remote
from .runner import RunnerError, run_batch

__all__ = [
    "Batch", "BatchError", "RemoteError", "RunnerError", "device_info", "load_batch",
    "pack_batch", "read_results", "run_batch", "run_remote",
]
