"""Hardware features of CPU kernels from their x86 assembly (after XFEATUR and Tuna's CPU model).

For each candidate the template is applied, the schedule is lowered (for the loop extents) and
compiled with LLVM (for the assembly). The row holds: the degree of parallelism, the vector width
used, dynamic instruction counts per class (FMA, other arithmetic, load, store, shuffle; vector
and scalar apart; integer, branch, other), the floating-point work they do compared with the
workload's FLOPs, register spills and stack traffic in loops, the stack frame size, how well the
assembly loops mapped to the TIR loops, and a histogram of load-to-use distances in the
innermost loops. Dynamic counts are static counts times the trip counts of the enclosing loops
(see ``loop_map``); counts are ``log2(1 + x)``, scaled up to the workload's FLOPs when the map
found less than half of them (``cover_workload``).
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

import numpy as np

from ..analysis import asm_cpu, asm_loops
from ..analysis.loop_map import (LOAD_USE_NAMES, IRLoop, innermost, instruction_weights,
                                 ir_loops, load_use_histogram, log2p, loop_trips, loop_weights,
                                 map_loops)
from ..measure.types import MeasureInput
from .base import CachedExtractor

CLASS_NAMES = tuple(f"{c}_{v}" for c in asm_cpu.VECTOR_CLASSES for v in ("vec", "scalar")) + (
    "int", "branch", "other")
FEATURE_NAMES = (
    "invalid", "log_parallel", "parallel_balance", "vector_bits", "vector_fraction",
    *CLASS_NAMES,
    "log_fp_lanes", "fp_work_ratio", "spill_stores", "spill_loads", "log_stack_bytes",
    "n_loops", "loop_depth", "mapped_fraction", *LOAD_USE_NAMES,
    "log_static_instructions", "log_dynamic_instructions",
)


@dataclass(frozen=True)
class CPUProfile:
    """Dynamic instruction statistics of one kernel (raw numbers, not yet scaled)."""

    counts: dict  # class name (CLASS_NAMES) -> dynamic count
    vector_bits: int
    vector_fraction: float  # packed share of dynamic FP arithmetic (FMA + arith)
    fp_lanes: float  # FP lane operations, an FMA counting two
    spill_stores: float
    spill_loads: float
    stack_bytes: int
    n_loops: int
    loop_depth: int
    mapped: int
    load_use: np.ndarray
    static_instructions: int
    dynamic_instructions: float


def is_lambda(name: str) -> bool:
    return "parallel_lambda" in name


def asm_program(text: str) -> asm_loops.AsmProgram:
    """The kernel body of a TVM listing: the ``*_compute_`` functions with their parallel lambdas
    inlined at the launch (not the packed-function wrapper, which only checks arguments)."""
    funcs = asm_cpu.parse_functions(text)
    roots = [f.name for f in funcs if f.name.endswith("_compute_")]
    if not roots:
        roots = [f.name for f in funcs if not is_lambda(f.name) and not f.name.startswith(
            ("__tvm_ffi_", "__tvm_set_raised", "__truncsfhf2", "__extendhfsf2"))]
    return asm_loops.link(funcs, roots, is_lambda)


def stack_bytes(prog: asm_loops.AsmProgram) -> int:
    """The largest stack frame a function of the program reserves (``sub $N, %rsp``)."""
    return max((asm_cpu.immediate(ins.operands[0]) or 0 for ins in prog.instructions
                if ins.mnemonic.startswith("sub") and ins.operands[-1:] == ("%rsp",)), default=0)


def dynamic_weights(prog: asm_loops.AsmProgram, ir: list[IRLoop], threads: int = 1):
    """``(loops, mapping, weights, per_ins)``: the code loops of ``prog`` mapped to the IR loops
    ``ir`` (parallel loops split over ``threads`` tasks as TVM's runtime does), how many times
    each body runs, and each instruction's dynamic count."""
    forest = asm_loops.find_loops(prog)
    loops = forest.loops
    mapping = map_loops(loops, ir)
    weights = loop_weights(loops, loop_trips(loops, ir, mapping, threads), forest.entry)
    per_ins = instruction_weights(len(prog.instructions), loops, weights) * forest.frequency
    return loops, mapping, weights, per_ins


def profile(prog: asm_loops.AsmProgram, ir: list[IRLoop], threads: int = 1,
            dynamic=None) -> CPUProfile:
    """Dynamic counts of ``prog`` with its loops mapped to the IR loops ``ir``; parallel loops
    are split over ``threads`` tasks as TVM's runtime does (``dynamic``: ``dynamic_weights``'
    answer, when already computed)."""
    loops, mapping, weights, per_ins = dynamic or dynamic_weights(prog, ir, threads)
    in_loop = np.zeros(len(prog.instructions), dtype=bool)
    for lp in loops:
        in_loop[sorted(lp.body)] = True

    counts = dict.fromkeys(CLASS_NAMES, 0.0)
    bits = 0
    fp_lanes = packed_fp = all_fp = spill_st = spill_ld = 0.0
    for ins, w, looped in zip(prog.instructions, per_ins, in_loop):
        ic = asm_cpu.classify(ins)
        if ic.cls in asm_cpu.VECTOR_CLASSES:
            counts[f"{ic.cls}_{'vec' if ic.vector else 'scalar'}"] += w
        else:
            counts[ic.cls] += w
        if ic.cls in ("fma", "arith") and ic.elem_bytes:
            fp_lanes += w * asm_cpu.lanes(ic) * (2 if ic.cls == "fma" else 1)
            all_fp += w
            if ic.vector:
                packed_fp += w
                bits = max(bits, ic.bits)
        if looped:
            st, ld = asm_cpu.is_spill(ins, ic)
            spill_st += w * st
            spill_ld += w * ld
    if loops:
        pairs = [(d, weights[i]) for i in innermost(loops)
                 for d in asm_cpu.load_use_distances(prog.instructions, loops[i].body)]
    else:  # fully unrolled: the whole kernel is one straight-line body
        pairs = [(d, 1.0) for d in asm_cpu.load_use_distances(
            prog.instructions, range(len(prog.instructions)), wrap=False)]
    return CPUProfile(
        counts=counts, vector_bits=bits, vector_fraction=packed_fp / all_fp if all_fp else 0.0,
        fp_lanes=fp_lanes, spill_stores=spill_st, spill_loads=spill_ld,
        stack_bytes=stack_bytes(prog), n_loops=len(loops),
        loop_depth=1 + max((lp.depth for lp in loops), default=-1),
        mapped=sum(m is not None for m in mapping), load_use=load_use_histogram(pairs),
        static_instructions=len(prog.instructions), dynamic_instructions=float(per_ins.sum()))


def parallel_extent(ir: list[IRLoop]) -> int:
    """Iterations of the widest parallel loop nest (1 if nothing runs in parallel)."""
    best = 1
    for lp in ir:
        if lp.kind != "parallel":
            continue
        extent, parent = lp.extent, lp.parent
        while parent >= 0:
            if ir[parent].kind == "parallel":
                extent *= ir[parent].extent
            parent = ir[parent].parent
        best = max(best, extent)
    return best


def feature_row(prof: CPUProfile, ir: list[IRLoop], flops: int, cores: int) -> np.ndarray:
    """The ``FEATURE_NAMES`` row of one kernel."""
    par = parallel_extent(ir)
    balance = par / (cores * math.ceil(par / cores)) if par > 1 else 1.0 / cores
    values = {
        "invalid": 0.0, "log_parallel": math.log2(par), "parallel_balance": balance,
        "vector_bits": float(prof.vector_bits), "vector_fraction": prof.vector_fraction,
        **{k: log2p(v) for k, v in prof.counts.items()},
        "log_fp_lanes": log2p(prof.fp_lanes), "fp_work_ratio": prof.fp_lanes / max(flops, 1),
        "spill_stores": log2p(prof.spill_stores), "spill_loads": log2p(prof.spill_loads),
        "log_stack_bytes": log2p(prof.stack_bytes), "n_loops": float(prof.n_loops),
        "loop_depth": float(prof.loop_depth),
        "mapped_fraction": prof.mapped / prof.n_loops if prof.n_loops else 1.0,
        **dict(zip(LOAD_USE_NAMES, prof.load_use.tolist())),
        "log_static_instructions": log2p(prof.static_instructions),
        "log_dynamic_instructions": log2p(prof.dynamic_instructions),
    }
    return cover_workload(np.asarray([values[n] for n in FEATURE_NAMES], dtype=np.float32))


# the dynamic counts of a row (log2(1 + count) columns) that scale with how often loops run
DYNAMIC = CLASS_NAMES + ("log_fp_lanes", "spill_stores", "spill_loads", "log_dynamic_instructions")
MIN_WORK_RATIO = 0.5
_DYNAMIC_COLS = [FEATURE_NAMES.index(n) for n in DYNAMIC]
_RATIO, _INVALID = FEATURE_NAMES.index("fp_work_ratio"), FEATURE_NAMES.index("invalid")


def cover_workload(row: np.ndarray) -> np.ndarray:
    """``row`` with its dynamic counts scaled up to the workload's FLOPs when the counted FP work
    falls below ``MIN_WORK_RATIO`` of them.

    A kernel cannot do less arithmetic than its workload, so such a row missed loops in the map
    (a code loop without a trip count or an IR loop, counted once). Uncorrected, those configs
    look cheap, and a model trained on other tasks ranked them among its picks: 17x and 51x
    slower than the best on held-out tasks. Scaling every dynamic count by the missing factor
    assumes the unmapped loops enclose the whole kernel; ``fp_work_ratio`` keeps what the map
    found, so the correction stays visible. Over the committed datasets' 110 tasks it lifted
    XGBoost's held-out top-10 ratio from 0.933 to 0.940 (docs/cost-models.md, "Counting the whole workload").
    """
    row = np.array(row, dtype=np.float32)
    ratio = float(row[_RATIO])
    if row[_INVALID] > 0 or not 0.0 < ratio < MIN_WORK_RATIO:
        return row
    counts = np.exp2(row[_DYNAMIC_COLS].astype(np.float64)) - 1.0
    row[_DYNAMIC_COLS] = np.log2(1.0 + counts / ratio)
    return row


def lower_cpu(mod, target):
    """``mod`` through the TIR pipeline ``tvm.compile`` applies, before code generation."""
    import tvm

    bound = tvm.tirx.transform.BindTarget(target.with_host(target))(mod)
    pipeline, _, _ = tvm.tirx.get_tir_pipeline("default")
    return pipeline(bound)


def assembly_of_lowered(lowered, target) -> str:
    """The x86 assembly ``tvm.compile`` gives for the module ``lower_cpu`` returned: its last
    steps (``tvm.tirx.build`` after the pipeline), so the pipeline, a third of a row's cost,
    runs once and not twice."""
    import tvm
    from tvm.tirx.build import split_host_device_mods, tir_to_runtime

    _, finalize_host, finalize_device = tvm.tirx.get_tir_pipeline("default")
    host, devices = split_host_device_mods(lowered)
    devices = {t: finalize_device()(m) for t, m in devices.items()}
    return tir_to_runtime(finalize_host()(host), devices, target).inspect_source("asm")


def module_ir_loops(lowered) -> list[IRLoop]:
    """IR loops of every function of a lowered module, functions in module order."""
    out: list[IRLoop] = []
    for _, func in lowered.functions.items():
        base = len(out)
        for lp in ir_loops(func.body):
            out.append(dataclasses.replace(lp, parent=lp.parent + base if lp.parent >= 0 else -1))
    return out


class HardwareCPUFeatures(CachedExtractor):
    """XFEATUR/Tuna-style hardware features of CPU candidates, one fixed-width row each.

    Each row costs a compilation (tens of milliseconds to a minute for a huge unrolled kernel),
    so rows are cached per (task key, config) and computed in ``workers`` processes with
    ``timeout_s`` each (``workers=0``: in this process, no limit). Invalid configs, failed
    compilations and overruns give a zero row with ``invalid`` = 1.
    """

    name = "hardware"
    version = 2  # 2: dynamic counts cover the workload's FLOPs (``cover_workload``)

    def __init__(self, cache_size: int = 50_000, workers: int = 1, timeout_s: float = 30.0,
                 ilp: bool = False):
        super().__init__(cache_size, workers, timeout_s)
        # also list-schedule the assembly for the ``ilp`` extractor (``list_schedule``): its
        # columns are cached after this row's, so one compilation serves both
        self.ilp = ilp

    @property
    def dim(self) -> int:
        return len(FEATURE_NAMES)

    def with_ilp(self) -> "HardwareCPUFeatures":
        """This extractor, computing ``ilp`` rows from now on (cached rows without them and
        workers started without them are dropped)."""
        if not self.ilp:
            self.ilp = True
            self._rows.clear()
            self.close()
        return self

    def extract(self, inputs) -> np.ndarray:
        return super().extract(inputs)[:, :len(FEATURE_NAMES)]

    def ilp_rows(self, inputs) -> np.ndarray:
        """The ``list_schedule.FEATURE_NAMES`` rows of ``inputs`` (turns ``ilp`` on)."""
        from ..analysis.list_schedule import FEATURE_NAMES as ILP_NAMES

        rows = super(HardwareCPUFeatures, self.with_ilp()).extract(inputs)
        return rows[:, len(FEATURE_NAMES):] if len(inputs) else np.zeros((0, len(ILP_NAMES)),
                                                                          dtype=np.float32)

    def _worker_kwargs(self) -> dict:
        return {"workers": 0, "ilp": self.ilp}

    def failed_row(self) -> np.ndarray:
        if not self.ilp:
            return invalid_row()
        from ..analysis import list_schedule

        return np.concatenate([invalid_row(), list_schedule.invalid_row()])

    def _compute(self, inp: MeasureInput) -> np.ndarray:
        from ..space import apply_config

        try:
            sch = apply_config(inp.task, inp.config, self.space_of(inp.task))
            target = inp.task.tvm_target()
            lowered = lower_cpu(sch.mod, target)
            ir = module_ir_loops(lowered)
            asm = assembly_of_lowered(lowered, target)
        except Exception:  # InvalidConfigError, and TVM's own errors for configs it cannot build
            return self.failed_row()
        cores = int(inp.task.target.get("num-cores") or os.cpu_count() or 1)
        prog = asm_program(asm)
        dynamic = dynamic_weights(prog, ir, cores)
        row = feature_row(profile(prog, ir, cores, dynamic), ir, inp.task.workload.flops, cores)
        if not self.ilp:
            return row
        from ..analysis import list_schedule

        ratio = float(row[_RATIO])  # scaled up as the counts are (``cover_workload``)
        scale = 1.0 / ratio if 0.0 < ratio < MIN_WORK_RATIO else 1.0
        ilp = list_schedule.ilp_row(prog, dynamic[0], dynamic[3], inp.task.workload.flops,
                                    list_schedule.core_of(inp.task.target), scale)
        return np.concatenate([row, ilp])


def invalid_row() -> np.ndarray:
    row = np.zeros(len(FEATURE_NAMES), dtype=np.float32)
    row[FEATURE_NAMES.index("invalid")] = 1.0
    return row
