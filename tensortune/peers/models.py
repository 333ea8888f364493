"""The engines a user would otherwise deploy a whole model with, each run in this process.

Every peer is a ``ModelPeer``: built once from an ONNX file or a torch module (``build_s`` is
what that took), then ``run(inputs)`` maps numpy inputs to numpy outputs, the same call a user
makes. ``time_interleaved`` times several of them in alternating rounds, so a noisy neighbour
slows them all alike and the ratios stay honest.

* ONNX Runtime: CPU execution provider, all graph optimizations (its NCHWc transformer
  included), ``intra_op_num_threads`` = threads.
* OpenVINO: CPU plugin, latency hint, f32 inference precision, ``INFERENCE_NUM_THREADS``.
* PyTorch eager and ``torch.compile`` (inductor), ``torch.set_num_threads``.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np


@dataclasses.dataclass
class ModelPeer:
    """A runnable model: ``run(list of numpy inputs) -> list of numpy outputs``."""

    name: str
    run: Callable[[Sequence[np.ndarray]], list[np.ndarray]]
    build_s: float = 0.0


def export_onnx(module, example_inputs: tuple, path: str | Path, opset: int = 17) -> Path:
    """Export a torch module to ONNX with the TorchScript exporter (the one both ONNX Runtime
    and OpenVINO read without surprises); reused when ``path`` exists."""
    import torch

    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with torch.no_grad():
            torch.onnx.export(module.eval(), tuple(example_inputs), str(path), dynamo=False,
                              opset_version=opset)
    return path


def ort_options(threads: int):
    """ONNX Runtime's session options for a peer: ``threads`` intra-op threads, one inter-op,
    every graph optimization."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return options


def onnxruntime_peer(path: str | Path, threads: int) -> ModelPeer:
    import onnxruntime as ort

    start = time.perf_counter()
    session = ort.InferenceSession(str(path), ort_options(threads),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run(inputs):
        return session.run(None, dict(zip(names, inputs)))

    return ModelPeer("onnxruntime", run, time.perf_counter() - start)


def openvino_peer(path: str | Path, threads: int) -> ModelPeer:
    import openvino as ov

    start = time.perf_counter()
    compiled = ov.Core().compile_model(str(path), "CPU", {
        "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32",
        "INFERENCE_NUM_THREADS": threads})
    request = compiled.create_infer_request()
    outputs = compiled.outputs

    def run(inputs):
        result = request.infer(list(inputs))
        return [np.asarray(result[o]) for o in outputs]

    return ModelPeer("openvino", run, time.perf_counter() - start)


def torch_peer(module, threads: int, compile: bool = False) -> ModelPeer:
    """PyTorch eager, or ``torch.compile`` (compiled on the first run, counted in ``build_s``)."""
    import torch

    torch.set_num_threads(threads)
    module = module.eval()
    fn = torch.compile(module) if compile else module

    def run(inputs):
        with torch.no_grad():
            out = fn(*[torch.from_numpy(np.ascontiguousarray(x)) for x in inputs])
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return [o.numpy() for o in outs]

    peer = ModelPeer("torch.compile" if compile else "pytorch", run)
    return peer


def warm(peer: ModelPeer, inputs: Sequence[np.ndarray], times: int = 3) -> list[np.ndarray]:
    """Run ``peer`` a few times (a compiling peer compiles on the first; that time is added
    to ``build_s``) and return its outputs."""
    start = time.perf_counter()
    out = peer.run(inputs)
    if peer.name == "torch.compile":
        peer.build_s += time.perf_counter() - start
    for _ in range(times - 1):
        out = peer.run(inputs)
    return out


def time_interleaved(peers: Mapping[str, Callable[[], object]], rounds: int = 5,
                     per_round: int = 10, settle_s: float = 0.3) -> dict[str, list[float]]:
    """Seconds per call of each ``peers`` entry: ``rounds`` rounds, each timing every entry
    ``per_round`` times in turn (the round's median kept), so all share the same moments of
    the machine; returns each entry's per-round medians.

    Before each entry's calls: ``settle_s`` of sleep and one untimed call. Every engine's
    worker threads spin for a while after a call (tensortune's launcher about 10 ms, ONNX
    Runtime's pool too, TVM's own pool up to 300,000 yields), and on two cores the next
    entry's calls shared them with the spinning threads: a 1.6 ms ONNX Runtime model made
    tensortune's recurrent model 8.2 ms instead of 6.5; with 20 ms of settling, a TVM pool
    worker still took 60 ms of CPU during ONNX Runtime's next 20 calls, which timed 6.3 ms
    instead of 1.6 in three of four ``tune-model`` comparisons (2026-11-28). 0.3 s: none in
    three."""
    result: dict[str, list[float]] = {name: [] for name in peers}
    for _ in range(rounds):
        for name, fn in peers.items():
            if settle_s > 0:
                time.sleep(settle_s)
                fn()
            samples = []
            for _ in range(per_round):
                start = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - start)
            result[name].append(statistics.median(samples))
    return result


def check_close(name: str, got: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                rtol: float = 1e-3) -> float:
    """The largest error relative to the reference's scale; ``RuntimeError`` above ``rtol``."""
    worst = 0.0
    for g, e in zip(got, expected, strict=True):
        g, e = np.asarray(g, np.float64), np.asarray(e, np.float64)
        if g.shape != e.shape:
            raise RuntimeError(f"{name}: output shape {g.shape} differs from {e.shape}")
        scale = max(1.0, float(np.max(np.abs(e))))
        worst = max(worst, float(np.max(np.abs(g - e))) / scale)
    if worst > rtol:
        raise RuntimeError(f"{name}: output differs from the reference (max error {worst:.3g} "
                           f"of its scale)")
    return worst
