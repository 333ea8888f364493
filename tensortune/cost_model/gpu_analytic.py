"""Tuna's analytical GPU cost model: a CUDA candidate's time from its PTX, with no GPU.

No CUDA timings exist on this project's machines to train a GPU model on, so, as Tuna (seed
001, section B) does, the score is computed, not learned, from the ``hardware_cuda`` row of
the candidate (nvcc's PTX and ptxas report):

- issue time: the dynamic warp instructions of each class times its issue cost on one of an
  SM's four schedulers (FP32 FMA and arithmetic 1, integer 2, shared memory 4, global and local
  memory 4, barriers 2), spread over the SMs the grid occupies;
- latency hiding: an SM hides memory and pipeline latency with about 8 warps per scheduler;
  fewer resident warps (registers, shared memory or a small grid limit them) slow issue in
  proportion (Tuna's warp latency hiding and SM occupancy);
- the tail wave: a grid of 1.2 waves takes 2 waves' time;
- memory: global loads and stores (4 bytes each) at the GPU's bandwidth; the slower of issue
  and memory is the kernel's time, plus register spills (local memory traffic) and a launch.

The prediction is a throughput (TFLOP/s of the workload), so configs rank by it and a
model's per-task throughput can be reported. It ranks; it does not promise absolute times.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..features.hardware_cuda import FEATURE_NAMES, GPUSpec, HardwareCUDAFeatures
from ..measure.types import MeasureInput
from .base import CostModel, ModelSpec

ISSUE_COST = {"fma": 1.0, "arith": 1.0, "int": 2.0, "ld.global": 4.0, "ld.shared": 4.0,
              "ld.local": 8.0, "st.global": 4.0, "st.shared": 4.0, "st.local": 8.0, "bar": 2.0,
              "branch": 1.0, "other": 1.0}
SCHEDULERS = 4
WARPS_TO_HIDE = 8  # resident warps per scheduler that hide latency fully
_COL = {name: i for i, name in enumerate(FEATURE_NAMES)}


@dataclass(frozen=True)
class GPUClock:
    """What the time needs beyond ``GPUSpec``'s limits (defaults: H100 SXM)."""

    ghz: float = 1.755
    bandwidth_gbs: float = 3350.0
    launch_us: float = 3.0


def _count(row: np.ndarray, cls: str) -> float:
    return 2.0 ** float(row[_COL[f"dyn_{cls}"]]) - 1.0  # the row holds log2(1 + count)


def predicted_seconds(row: np.ndarray, spec: GPUSpec = GPUSpec(),
                      clock: GPUClock = GPUClock()) -> float:
    """Seconds per call of the candidate whose ``hardware_cuda`` row is ``row``; infinity for
    a config that is invalid or did not compile."""
    if row[_COL["invalid"]] or row[_COL["nvcc_failed"]]:
        return math.inf
    blocks = 2.0 ** float(row[_COL["log_blocks"]])
    warps_per_block = max(float(row[_COL["warps"]]), 1.0)
    occupancy = float(row[_COL["occupancy"]])
    if occupancy <= 0:
        return math.inf  # a block the SM cannot hold at all
    resident = occupancy * spec.threads / spec.warp / warps_per_block  # blocks per SM
    sms_used = min(spec.sms, blocks)
    warps_per_scheduler = min(resident, blocks / sms_used) * warps_per_block / SCHEDULERS
    hiding = min(1.0, warps_per_scheduler / WARPS_TO_HIDE)
    issue = sum(_count(row, c) / spec.warp * cost for c, cost in ISSUE_COST.items())
    waves = float(row[_COL["waves"]])
    tail = math.ceil(waves) / waves if waves >= 1.0 else 1.0
    compute_s = issue / (sms_used * SCHEDULERS * hiding) / (clock.ghz * 1e9) * tail
    global_bytes = 4.0 * (_count(row, "ld.global") + _count(row, "st.global"))
    local_bytes = 4.0 * (_count(row, "ld.local") + _count(row, "st.local"))
    memory_s = (global_bytes + local_bytes) / (clock.bandwidth_gbs * 1e9)
    return max(compute_s, memory_s) + clock.launch_us * 1e-6


class AnalyticGPUModel(CostModel):
    """A cost model with ``predict`` and nothing to fit: the predicted TFLOP/s of each input
    (``predicted_seconds`` of its ``hardware_cuda`` row), 0 for a config that cannot run."""

    name = "gpu-analytic"
    label_scale = 1.0  # predictions are TFLOP/s already
    compiles = True  # every prediction compiles its candidate (nvcc)
    trained = True  # nothing to learn: its opinion holds from the start

    def __init__(self, extractor: HardwareCUDAFeatures | None = None,
                 spec: GPUSpec = GPUSpec(), clock: GPUClock = GPUClock()):
        self.extractor = extractor or HardwareCUDAFeatures(spec=spec)
        self.spec, self.clock = spec, clock

    def fit(self, inputs, results) -> None:
        """Nothing to learn (no GPU timings exist here); kept for the ``CostModel`` interface."""

    def predict(self, inputs: list[MeasureInput]) -> np.ndarray:
        rows = self.extractor.extract(inputs)
        out = np.zeros(len(inputs))
        for i, (inp, row) in enumerate(zip(inputs, rows)):
            seconds = predicted_seconds(row, self.spec, self.clock)
            if math.isfinite(seconds):
                out[i] = float(inp.task.workload.flops) / seconds / 1e12
        return out


SPEC = ModelSpec("gpu-analytic", "Tuna's analytical GPU model over nvcc's PTX (nothing to fit)",
                 lambda extractor=None, seed=0: AnalyticGPUModel(extractor), fresh=False,
                 features="hardware_cuda")
