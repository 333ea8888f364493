"""The ``hardware_cuda`` feature row of CUDA kernels, from nvcc's PTX and ptxas report.

XFEATUR's and Tuna's GPU model: ptxas's explicit numbers (registers, spills, stack, shared
memory, barriers), threads per block and blocks, the occupancy and waves they give on the target
GPU, dynamic PTX instruction counts per class (static counts times the trip counts of the
enclosing loops, per thread times the threads launched), and a histogram of load-to-use
distances over PTX registers. Both the ``hardware_cuda`` extractor and the CUDA builder (which
compiles anyway, so gets the row for free) use it; nvcc itself runs in ``tensortune.toolchain``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import ptx
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


def cuda_row(kernels, ptx_text: str, report: str, spec: GPUSpec = GPUSpec()) -> np.ndarray:
    """The feature row of lowered ``kernels`` (``(name, PrimFunc)``) from nvcc's PTX and ptxas
    report of their CUDA C."""
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
