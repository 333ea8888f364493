"""Where ONNX Runtime's time goes on a model: its own per-node profile, summed per operator
type and output shape, to set beside ``tensortune profile`` (which functions hold a tuned model
back against the peer).

ONNX Runtime fuses on its own (``FusedConv``, ``FusedMatMul``, ``SkipLayerNormalization``, NCHWc
``Conv``), so its rows name its kernels, not the ONNX file's nodes."""
from __future__ import annotations

import collections
import dataclasses
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .models import ort_options


@dataclasses.dataclass(frozen=True)
class PeerKernel:
    """One kind of ONNX Runtime kernel: its operator, output shape, calls and time per run."""

    op: str
    shape: str
    calls: int
    ms: float


def onnxruntime_profile(path: str | Path, inputs: Sequence[np.ndarray], threads: int,
                        runs: int = 20) -> tuple[float, list[PeerKernel]]:
    """``(kernel ms per run, kernels by time)`` of ``runs`` profiled runs of the ONNX file
    (the same session options as ``onnxruntime_peer``; two warm-up runs are not counted)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="tt-ortprof-") as tmp:
        options = ort_options(threads)
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "ort")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        feeds = dict(zip([i.name for i in session.get_inputs()], inputs))
        for _ in range(runs + 2):  # the first two warm it up; ``summarize`` keeps the last
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    return summarize(events, runs)


def summarize(events: list[dict], runs: int) -> tuple[float, list[PeerKernel]]:
    """Kernel events of the last ``runs`` runs (the first ones warm the profiled session) summed
    per operator type and output shape."""
    nodes = [e for e in events if e.get("cat") == "Node"
             and e.get("name", "").endswith("_kernel_time")]
    spans = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events
                   if e.get("cat") == "Session" and e.get("name") == "model_run")
    kept = [[n for n in nodes if start <= n["ts"] <= end] for start, end in spans[-runs:]]
    if not any(kept):  # a profile without run markers: every kernel event, one run
        kept = [nodes]
    totals: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for run in kept:
        for e in run:
            args = e.get("args", {})
            shapes = args.get("output_type_shape", [])
            shape = "x".join(str(d) for d in next(iter(shapes[0].values()))) if shapes else ""
            key = (args.get("op_name", "?"), shape)
            totals[key][0] += 1
            totals[key][1] += float(e.get("dur", 0)) / 1e3
    n = max(1, len(kept))
    kernels = [PeerKernel(op, shape, max(1, round(c / n)), ms / n) for (op, shape), (c, ms) in
               totals.items()]
    kernels.sort(key=lambda k: -k.ms)
    return sum(k.ms for k in kernels), kernels


__all__ = ["PeerKernel", "onnxruntime_profile", "summarize"]
