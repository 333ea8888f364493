"""Roofline features: the ``hardware`` row restated per FLOP, with port-throughput bounds.

The hardware row counts instructions in absolute terms (``log2(1 + count)``), so a good config of
a small task and a poor config of a large one can look alike. Dividing by the workload's FLOPs
makes the counts comparable across tasks, which is what a model pretrained on other tasks needs
(held-out Pearson 0.85 to 0.89 on this project's dataset with ``itervar+hardware+roofline``).

Following Tuna's static CPU model, the dynamic counts are also turned into cycle bounds, one per
execution resource: FP arithmetic on the FMA pipes, loads, stores, shuffles, and the front end's
issue width. The largest is the kernel's estimated cycle count; dividing it by the parallel speed-up
gives the estimated time. Each is reported as ``log2(cycles) - log2(FLOPs)``, i.e. cycles per FLOP.

Nothing is compiled here: the row is derived from the hardware extractor's row (which a feature
store may already hold), so ``roofline`` is cheap once ``hardware`` rows exist.
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from ..analysis.ports import PortModel, ports_of
from ..measure.types import MeasureInput
from .base import FeatureExtractor
from .hardware_cpu import DYNAMIC, FEATURE_NAMES as HW_NAMES


RESOURCES = ("fp", "load", "store", "shuffle", "issue")
# absolute dynamic counts (hardware row columns, log2(1 + x)) restated per FLOP
PER_FLOP = DYNAMIC
FEATURE_NAMES = (
    "invalid", *(f"{n}_per_flop" for n in PER_FLOP),
    *(f"{r}_cycles_per_flop" for r in RESOURCES),
    "bound_cycles_per_flop", "bound_resource", "speedup", "time_per_flop",
)
ZERO_PER_FLOP = -40.0  # log2 per FLOP of a count of zero: below any real kernel's
_COL = {n: i for i, n in enumerate(HW_NAMES)}


def _linear(rows: np.ndarray, name: str) -> np.ndarray:
    return np.exp2(rows[:, _COL[name]].astype(np.float64)) - 1.0


def roofline_rows(hw: np.ndarray, flops: int, cores: int, ports: PortModel = PortModel()
                  ) -> np.ndarray:
    """``FEATURE_NAMES`` rows from hardware rows ``hw`` of one task (``flops`` each)."""
    hw = np.atleast_2d(np.asarray(hw, dtype=np.float64))
    log_flops = math.log2(max(flops, 1))
    both = {c: _linear(hw, f"{c}_vec") + _linear(hw, f"{c}_scalar")
            for c in ("fma", "arith", "load", "store", "shuffle")}
    # passes per vector FP instruction: one, unless it is wider than the pipes
    passes = np.maximum(1.0, hw[:, _COL["vector_bits"]] / ports.fp_bits)
    fp_ops = (_linear(hw, "fma_vec") + _linear(hw, "arith_vec")) * passes \
        + _linear(hw, "fma_scalar") + _linear(hw, "arith_scalar")
    cycles = np.stack([
        fp_ops / ports.fp, both["load"] / ports.load,
        both["store"] / ports.store, both["shuffle"] / ports.shuffle,
        _linear(hw, "log_dynamic_instructions") / ports.issue,
    ], axis=1)
    bound = cycles.max(axis=1)
    counts = hw[:, [_COL[n] for n in PER_FLOP]]
    parallel = np.exp2(hw[:, _COL["log_parallel"]])
    # the parallel loop's iterations spread over the cores, as evenly as its balance says
    speedup = np.where(parallel > 1, np.minimum(parallel, cores) * hw[:, _COL["parallel_balance"]],
                       1.0)
    speedup = np.maximum(speedup, 1.0)
    out = np.column_stack([
        hw[:, _COL["invalid"]],
        # a class the kernel never executes sits at one floor, whatever the task's size
        np.where(counts > 0, counts - log_flops, ZERO_PER_FLOP),
        np.log2(1.0 + cycles) - log_flops,
        np.log2(1.0 + bound) - log_flops, np.argmax(cycles, axis=1).astype(np.float64),
        speedup, np.log2(1.0 + bound / speedup) - log_flops,
    ])
    invalid = hw[:, _COL["invalid"]] > 0
    out[invalid, 1:] = 0.0
    return out.astype(np.float32)


class RooflineFeatures(FeatureExtractor):
    """Per-FLOP counts and port bounds derived from a ``hardware`` extractor's rows.

    ``hardware`` is the extractor to derive from (by default a new ``HardwareCPUFeatures``);
    pass a shared or stored one so each candidate is compiled once for both feature sets.
    """

    name = "roofline"
    source = "hardware"  # the extractor this one derives from; make_extractor shares it

    def __init__(self, hardware=None, ports: PortModel | None = None):
        if hardware is None:
            from .hardware_cpu import HardwareCPUFeatures

            hardware = HardwareCPUFeatures()
        if not isinstance(hardware, FeatureExtractor) or hardware.name != self.source:
            raise ValueError(f"roofline derives from the {self.source!r} extractor, "
                             f"not {hardware!r}")
        self.hardware = hardware
        self.ports = ports  # None: each task's target's (``ports_of``)

    @property
    def dim(self) -> int:
        return len(FEATURE_NAMES)

    def extract(self, inputs: Sequence[MeasureInput]) -> np.ndarray:
        out = np.zeros((len(inputs), self.dim), dtype=np.float32)
        if not inputs:
            return out
        hw = self.hardware.extract(inputs)
        by_task: dict[str, list[int]] = {}
        for i, inp in enumerate(inputs):
            by_task.setdefault(inp.task.key, []).append(i)
        for idx in by_task.values():
            task = inputs[idx[0]].task
            cores = int(task.target.get("num-cores") or os.cpu_count() or 1)
            out[idx] = roofline_rows(hw[idx], task.workload.flops, cores,
                                     self.ports or ports_of(task.target))
        return out

    def close(self) -> None:
        self.hardware.close()


__all__ = ["RooflineFeatures", "PortModel", "roofline_rows", "FEATURE_NAMES", "RESOURCES"]
