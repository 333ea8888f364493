"""Hardware features of CUDA kernels from nvcc's PTX and ptxas report (XFEATUR, Tuna's GPU model).

Nothing runs on a GPU: each candidate is scheduled, lowered (for the thread bindings and the loop
extents) and compiled by TVM to CUDA C, which ``nvcc -ptx`` turns into PTX and ``ptxas -v``
(through ``nvcc -cubin -Xptxas -v``) into a report of registers, spills, stack, shared memory and
barriers. The row holds those explicit features, threads per block and blocks, the occupancy and
waves they give on the target GPU, dynamic PTX instruction counts per class (static counts times
the trip counts of the enclosing loops, per thread times the threads launched), and a histogram of
load-to-use distances over PTX registers.
"""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import numpy as np

from ..measure.types import MeasureInput
from . import ptx
from .base import CachedExtractor
from .loop_map import (LOAD_USE_NAMES, IRLoop, innermost, instruction_weights, ir_loops,
                       load_use_histogram, log2p, loop_trips, loop_weights, map_loops,
                       thread_extents)

FEATURE_NAMES = (
    "invalid", "nvcc_failed", "log_threads", "log_blocks", "warps", "registers", "spill_stores",
    "spill_loads", "log_stack_frame", "log_shared_bytes", "barriers", "occupancy", "waves",
    *(f"dyn_{c}" for c in ptx.CLASSES), "log_thread_instructions", "fma_fraction", "n_loops",
    "mapped_fraction", *LOAD_USE_NAMES,
)


@dataclass(frozen=True)
class GPUSpec:
    """Per-SM limits that decide occupancy (defaults: H100 SXM, sm_90)."""

    sms: int = 132
    registers: int = 65536
    threads: int = 2048
    blocks: int = 32
    shared_bytes: int = 228 * 1024
    shared_reserved: int = 1024  # per block, taken by the runtime
    warp: int = 32
    register_unit: int = 256  # registers are allocated per warp in units of this


@dataclass(frozen=True)
class KernelProfile:
    name: str
    threads: int
    blocks: int
    per_thread: dict  # PTX class -> dynamic count per thread
    n_loops: int
    mapped: int
    load_use: np.ndarray
    info: ptx.PtxasInfo

    @property
    def total(self) -> dict:
        return {k: v * self.threads * self.blocks for k, v in self.per_thread.items()}


class NvccError(RuntimeError):
    """nvcc or ptxas failed (or is missing)."""


def compile_cuda(source: str, arch: str = "sm_90", nvcc: str = "/usr/local/bin/nvcc",
                 timeout_s: float = 120.0, cubin_path: str | None = None) -> tuple[str, str]:
    """(PTX text, ptxas report) of CUDA C ``source``: ``nvcc -ptx``, then ``nvcc -cubin -Xptxas
    -v`` on that PTX, in a temporary directory; the cubin is kept at ``cubin_path`` if given."""
    if shutil.which(nvcc) is None:
        raise NvccError(f"nvcc not found at {nvcc!r}")
    with tempfile.TemporaryDirectory(prefix="tensortune-cuda-") as tmp:
        cu, ptx_path = os.path.join(tmp, "kernel.cu"), os.path.join(tmp, "kernel.ptx")
        with open(cu, "w") as f:
            f.write(source)
        _run([nvcc, f"-arch={arch}", "-ptx", "-w", cu, "-o", ptx_path], timeout_s)
        cubin = os.path.join(tmp, "kernel.cubin")
        report = _run([nvcc, f"-arch={arch}", "-cubin", "-Xptxas", "-v", ptx_path, "-o", cubin],
                      timeout_s)
        if cubin_path:
            shutil.copyfile(cubin, cubin_path)
        with open(ptx_path) as f:
            return f.read(), report


def _run(cmd: list[str], timeout_s: float) -> str:
    # nvcc's front end (cicc) is a grandchild: killing nvcc, or the worker that ran it, leaves it
    # compiling (a huge unrolled kernel held two cores for 40 minutes so). coreutils' timeout
    # kills its whole process group when the time is up, even once its parent is gone.
    killer = shutil.which("timeout")
    bounded = [killer, "-s", "KILL", str(max(1, int(timeout_s))), *cmd] if killer else cmd
    try:
        done = subprocess.run(bounded, capture_output=True, text=True, timeout=timeout_s + 5)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise NvccError(f"{os.path.basename(cmd[0])} failed: {err}") from err
    if done.returncode != 0:
        raise NvccError(f"{' '.join(cmd[:3])} exited {done.returncode}: "
                        f"{done.stderr.strip()[:500]}")
    return done.stdout + done.stderr


def kernel_profile(kernel: ptx.PtxKernel, ir: list[IRLoop], threads: int, blocks: int,
                   info: ptx.PtxasInfo) -> KernelProfile:
    """Dynamic per-thread PTX counts of one kernel, its loops mapped to the IR loops ``ir``."""
    instrs = kernel.instructions
    forest = ptx.find_loops(kernel)
    loops = forest.loops
    mapping = map_loops(loops, ir)
    weights = loop_weights(loops, loop_trips(loops, ir, mapping), forest.entry)
    per_ins = instruction_weights(len(instrs), loops, weights) * forest.frequency
    counts = dict.fromkeys(ptx.CLASSES, 0.0)
    for ins, w in zip(instrs, per_ins):
        counts[ptx.classify(ins)] += w
    if loops:
        pairs = [(d, weights[i]) for i in innermost(loops)
                 for d in ptx.load_use_distances(instrs, loops[i].body)]
    else:  # fully unrolled: the whole kernel is one straight-line body
        pairs = [(d, 1.0) for d in ptx.load_use_distances(instrs, range(len(instrs)), wrap=False)]
    return KernelProfile(kernel.name, threads, blocks, counts, len(loops),
                         sum(m is not None for m in mapping), load_use_histogram(pairs), info)


def blocks_per_sm(threads: int, info: ptx.PtxasInfo, spec: GPUSpec) -> int:
    """Resident blocks per SM allowed by threads, registers and shared memory."""
    warps = max(math.ceil(threads / spec.warp), 1)
    by_threads = spec.threads // (warps * spec.warp)
    unit = spec.register_unit
    per_warp = math.ceil(max(info.registers, 1) * spec.warp / unit) * unit
    by_regs = spec.registers // (per_warp * warps)
    shared = info.shared_bytes + spec.shared_reserved
    by_shared = spec.shared_bytes // shared if info.shared_bytes else spec.blocks
    return max(min(by_threads, by_regs, by_shared, spec.blocks), 0)


def feature_row(profiles: list[KernelProfile], spec: GPUSpec = GPUSpec()) -> np.ndarray:
    """The ``FEATURE_NAMES`` row of the kernels of one candidate."""
    main = max(profiles, key=lambda p: sum(p.total.values()))
    totals = dict.fromkeys(ptx.CLASSES, 0.0)
    for p in profiles:
        for k, v in p.total.items():
            totals[k] += v
    info = main.info
    resident = blocks_per_sm(main.threads, info, spec)
    warps = math.ceil(main.threads / spec.warp)
    per_thread = sum(main.per_thread.values())
    n_loops = sum(p.n_loops for p in profiles)
    values = {
        "invalid": 0.0, "nvcc_failed": 0.0, "log_threads": math.log2(main.threads),
        "log_blocks": math.log2(main.blocks), "warps": float(warps),
        "registers": float(max(p.info.registers for p in profiles)),
        "spill_stores": log2p(max(p.info.spill_stores for p in profiles)),
        "spill_loads": log2p(max(p.info.spill_loads for p in profiles)),
        "log_stack_frame": log2p(max(p.info.stack_frame for p in profiles)),
        "log_shared_bytes": log2p(max(p.info.shared_bytes for p in profiles)),
        "barriers": float(max(p.info.barriers for p in profiles)),
        "occupancy": resident * warps * spec.warp / spec.threads,
        "waves": main.blocks / max(spec.sms * resident, 1) if resident else 0.0,
        **{f"dyn_{k}": log2p(v) for k, v in totals.items()},
        "log_thread_instructions": log2p(per_thread),
        "fma_fraction": main.per_thread["fma"] / per_thread if per_thread else 0.0,
        "n_loops": float(n_loops),
        "mapped_fraction": sum(p.mapped for p in profiles) / n_loops if n_loops else 1.0,
        **dict(zip(LOAD_USE_NAMES, main.load_use.tolist())),
    }
    return np.asarray([values[n] for n in FEATURE_NAMES], dtype=np.float32)


def flagged_row(flag: str) -> np.ndarray:
    """A zero row with one flag set (``invalid`` or ``nvcc_failed``)."""
    row = np.zeros(len(FEATURE_NAMES), dtype=np.float32)
    row[FEATURE_NAMES.index(flag)] = 1.0
    return row


class HardwareCUDAFeatures(CachedExtractor):
    """XFEATUR/Tuna-style hardware features of CUDA candidates, compiled with nvcc (no GPU).

    Each row costs a TVM build and two nvcc runs (about half a second), so rows are cached per
    (task key, config). Invalid configs give a zero row with ``invalid`` = 1, compilation
    failures one with ``nvcc_failed`` = 1.
    """

    name = "hardware_cuda"

    def __init__(self, nvcc: str = "/usr/local/bin/nvcc", arch: str = "sm_90",
                 spec: GPUSpec = GPUSpec(), timeout_s: float = 120.0, cache_size: int = 50_000,
                 workers: int = 1):
        # timeout_s bounds each nvcc run and, with workers > 0, each whole row
        super().__init__(cache_size, workers, timeout_s)
        self.nvcc, self.arch, self.spec = nvcc, arch, spec

    def _worker_kwargs(self) -> dict:
        return {"nvcc": self.nvcc, "arch": self.arch, "spec": self.spec,
                "timeout_s": self.timeout_s, "workers": 0}

    def _failed_row(self) -> np.ndarray:
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


def cuda_row(kernels, ptx_text: str, report: str, spec: GPUSpec = GPUSpec()) -> np.ndarray:
    """The feature row of lowered ``kernels`` (``(name, PrimFunc)``) from nvcc's PTX and ptxas
    report of their CUDA C (a builder that compiles anyway gets the row for free)."""
    parsed = {k.name: k for k in ptx.parse_ptx(ptx_text)}
    infos = ptx.parse_ptxas(report)
    profiles = []
    for name, func in kernels:
        if name not in parsed:
            continue
        extents = thread_extents(func.body)
        threads = math.prod(v for k, v in extents.items() if k.startswith("threadIdx"))
        blocks = math.prod(v for k, v in extents.items() if k.startswith("blockIdx"))
        profiles.append(kernel_profile(parsed[name], ir_loops(func.body), threads, blocks,
                                       infos.get(name, ptx.PtxasInfo())))
    if not profiles:
        return flagged_row("nvcc_failed")
    return feature_row(profiles, spec)
