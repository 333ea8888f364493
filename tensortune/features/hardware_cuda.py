"""Hardware features of CUDA kernels from nvcc's PTX and ptxas report (XFEATUR, Tuna's GPU model).

Nothing runs on a GPU: each candidate is scheduled, lowered (for the thread bindings and the loop
extents) and compiled by TVM to CUDA C, which ``nvcc -ptx`` turns into PTX and ``ptxas -v``
(through ``nvcc -cubin -Xptxas -v``) into a report of registers, spills, stack, shared memory and
barriers (``toolchain.compile_cuda``). What the row holds and how it is computed:
``analysis.cuda_row``, which the CUDA builder shares.
"""
from __future__ import annotations

import numpy as np

# the row's names and helpers, importable from here as before the analyses moved
from ..analysis.cuda_row import (FEATURE_NAMES, GPUSpec, KernelProfile, blocks_per_sm,
                                 cuda_row, feature_row, flagged_row, kernel_profile)
from ..measure.types import MeasureInput
from ..toolchain import NVCC, NvccError, compile_cuda
from .base import CachedExtractor


class HardwareCUDAFeatures(CachedExtractor):
    """XFEATUR/Tuna-style hardware features of CUDA candidates, compiled with nvcc (no GPU).

    Each row costs a TVM build and two nvcc runs (about half a second), so rows are cached per
    (task key, config). Invalid configs give a zero row with ``invalid`` = 1, compilation
    failures one with ``nvcc_failed`` = 1.
    """

    name = "hardware_cuda"

    def __init__(self, nvcc: str = NVCC, arch: str = "sm_90",
                 spec: GPUSpec = GPUSpec(), timeout_s: float = 120.0, cache_size: int = 50_000,
                 workers: int = 1):
        # timeout_s bounds each nvcc run and, with workers > 0, each whole row
        super().__init__(cache_size, workers, timeout_s)
        self.nvcc, self.arch, self.spec = nvcc, arch, spec

    def _worker_kwargs(self) -> dict:
        return {"nvcc": self.nvcc, "arch": self.arch, "spec": self.spec,
                "timeout_s": self.timeout_s, "workers": 0}

    def failed_row(self) -> np.ndarray:
        return flagged_row("nvcc_failed")

    @property
    def dim(self) -> int:
        return len(FEATURE_NAMES)

    def _compute(self, inp: MeasureInput) -> np.ndarray:
        import tvm

        from ..space import apply_config
        from ..space.cuda_template import device_functions, lower_for_cuda

        target = inp.task.tvm_target()
        try:
            sch = apply_config(inp.task, inp.config, self.space_of(inp.task))
            kernels = device_functions(lower_for_cuda(sch.mod, target))
            module = tvm.compile(sch.mod, target=target)
        except Exception:  # InvalidConfigError, and TVM's own errors for configs it cannot build
            return flagged_row("invalid")
        if not kernels or not module.mod.imports:
            return flagged_row("invalid")
        source = module.mod.imports[0].inspect_source("cuda")
        arch = str(inp.task.target.get("arch", self.arch))
        try:
            ptx_text, report = compile_cuda(source, arch, self.nvcc, self.timeout_s)
        except NvccError:
            return flagged_row("nvcc_failed")
        return cuda_row(kernels, ptx_text, report, self.spec)


__all__ = ["FEATURE_NAMES", "GPUSpec", "HardwareCUDAFeatures", "KernelProfile", "NvccError",
           "blocks_per_sm", "compile_cuda", "cuda_row", "feature_row", "flagged_row",
           "kernel_profile"]
