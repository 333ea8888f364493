"""``CUDARemoteRunner``: times CUDA candidates on a GPU host that serves the device runner.

A sibling of ``LocalRunner`` and ``RPCRunner`` with the same ``run`` contract. The GPU host runs
``python -m tensortune.device_runner --serve`` (numpy and CuPy, no TVM); each batch of built
candidates goes to it as one exported batch (``measure.cuda_export``) over HTTP, is timed there
with CUDA events and checked against the numpy reference, and comes back as result lines.

Failures, by whose they are: build errors pass through unmeasured; a candidate that fails,
hangs or computes a wrong result on the GPU comes back as its own result; a server that cannot
be reached (or answers with an error) is infrastructure, not the candidates': after ``retries``
tries the runner raises ``DeviceUnavailable`` and nothing is recorded or charged.
"""
from __future__ import annotations

import tempfile
import time

from ..settings import MeasureSettings
from .cuda_export import Timing, result_of, write_batch
from .rpc_runner import DeviceUnavailable
from .types import BuildResult, ErrorKind, MeasureInput, MeasureResult


class CUDARemoteRunner:
    """Times CUDA candidates on the device runner at ``url`` (``http://HOST:PORT``)."""

    def __init__(self, url: str, settings: MeasureSettings, seed: int = 0,
                 timing: Timing = Timing(), retries: int = 3, retry_pause_s: float = 2.0):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"CUDA device {url!r}: expected http://HOST:PORT")
        self.url = url.rstrip("/")
        self.settings = settings
        self.seed = seed
        self.timing = timing
        self.retries = retries
        self.retry_pause_s = retry_pause_s

    @property
    def name(self) -> str:
        return f"cuda:{self.url}"

    def run(self, inputs: list[MeasureInput], builds: list[BuildResult],
            verify: list[bool] | None = None) -> list[MeasureResult]:
        """One result per input, in order; every output is checked on the device."""
        results: list[MeasureResult | None] = [
            None if b.error is ErrorKind.NONE else
            MeasureResult((), b.error, b.message, build_s=b.build_s, timestamp=time.time(),
                          detail=b.detail)
            for b in builds]
        todo = [i for i, r in enumerate(results) if r is None]
        if todo:
            lines = self._remote([(inputs[i], builds[i]) for i in todo])
            for pos, i in enumerate(todo):
                line = lines.get(pos)
                results[i] = (result_of(line, builds[i].build_s) if line is not None else
                              MeasureResult((), ErrorKind.DEVICE_ERROR,
                                            "the device runner returned no result for it",
                                            build_s=builds[i].build_s, timestamp=time.time(),
                                            device=self.name))
        return results

    def _remote(self, items) -> dict[int, dict]:
        from ..device_runner.client import RemoteError, run_remote

        s = self.settings
        with tempfile.TemporaryDirectory(prefix="tensortune-cuda-batch-") as tmp:
            write_batch(tmp, items, self.seed, self.timing, s.rtol, s.atol)
            # the server times one candidate after another, each within its timeout
            limit = 60.0 + len(items) * (self.timing.timeout_s + 5.0)
            for attempt in range(1, self.retries + 1):
                try:
                    lines = run_remote(self.url, tmp, limit)
                    return {line["index"]: line for line in lines}
                except RemoteError as err:
                    if attempt == self.retries:
                        raise DeviceUnavailable(f"CUDA device {self.url}: {err}") from err
                    time.sleep(self.retry_pause_s * attempt)
        return {}

    def close(self) -> None:
        pass

    def __enter__(self) -> "CUDARemoteRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
