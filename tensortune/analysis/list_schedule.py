"""Tuna's ILP model: a list scheduler per basic block of x86 assembly, and the ``ilp`` features.

Seed 001 schedules each basic block on a simplified out-of-order core: a dependence graph (true
dependences through registers, memory kept in order), instruction latencies and a limited number
of execution units; the block's cost is the cycle its last result is ready, and the program's
cost the sum of block costs times block executions. Port-throughput bounds (``roofline``) cannot
see a kernel that waits on a chain of dependent FMAs; this can.

Per block: the list-scheduled length of one pass, the critical path (latency chains alone), the
throughput bound (the busiest port, or the issue width) and, for blocks inside loops, the
loop-carried recurrence (the longest chain from a register's value on entry to its value for the
next pass: an accumulator's FMA chain). Out of order, a loop's passes overlap, so its
steady-state cost is the larger of throughput and recurrence (``pipelined``). Pure text, no TVM:
parsing is ``asm_cpu``'s, blocks and loops ``cfg``/``asm_loops``'s; ``ilp.IlpFeatures`` gets the
assembly through the ``hardware`` extractor, which compiles each candidate once for both.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import asm_loops
from .asm_cpu import Instruction, classify, is_memory, reads, registers, writes
from .cfg import CodeLoop, basic_blocks
from .loop_map import innermost, instruction_weights, loop_weights
from .ports import ports_of


# -- cores ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    """The ports an instruction kind may issue to and its latency (issue to result, cycles)."""

    ports: tuple[str, ...]
    latency: int
    wide: tuple[str, ...] | None = None  # the ports of its 512-bit form, where they differ


@dataclass(frozen=True)
class Core:
    """A core class: its units, the width of its vector pipes (an instruction twice as wide holds
    its port for two cycles: AVX-512 on Zen 4) and how many instructions it renames per cycle."""

    name: str
    units: dict
    pipe_bits: int = 512
    issue: int = 6


# Zen 3/4 (Agner Fog, uops.info): FMA and multiplies on FP0/FP1, adds on FP2/FP3, shuffles on
# FP1/FP2; three loads a cycle, two of them vector; one vector store. Vector loads reach the FP
# registers 3 cycles later than integer ones.
ZEN = Core("zen", {
    "fma": Unit(("fp0", "fp1"), 4), "valu": Unit(("fp2", "fp3"), 3),
    "shuffle": Unit(("fp1", "fp2"), 3), "load": Unit(("ld0", "ld1", "ld2"), 4),
    "vload": Unit(("ld0", "ld1"), 7), "store": Unit(("st0", "st1"), 1),
    "vstore": Unit(("st0",), 1), "int": Unit(("alu0", "alu1", "alu2", "alu3"), 1),
    "branch": Unit(("alu0", "alu3"), 1), "move": Unit((), 0),
}, pipe_bits=256)
# Golden Cove / Sapphire Rapids: 256-bit FMAs on p0/p1, 512-bit ones on p0 (p0+p1 fused) and p5;
# shuffles on p5; three loads (two of 512 bits), two stores (one of 512 bits).
GOLDEN_COVE = Core("golden_cove", {
    "fma": Unit(("p0", "p1"), 4, wide=("p0", "p5")),
    "valu": Unit(("p0", "p1", "p5"), 3, wide=("p0", "p5")), "shuffle": Unit(("p5",), 3),
    "load": Unit(("p2", "p3", "p11"), 5), "vload": Unit(("p2", "p3", "p11"), 6, wide=("p2", "p3")),
    "store": Unit(("p4", "p9"), 1), "vstore": Unit(("p4", "p9"), 1, wide=("p4",)),
    "int": Unit(("p0", "p1", "p5", "p6", "p10"), 1), "branch": Unit(("p0", "p6"), 1),
    "move": Unit((), 0),
}, pipe_bits=512)


def core_of(target: dict) -> Core:
    """The core class of an LLVM CPU target (AMD Zen by ``mcpu``, else Golden Cove), its pipe
    width taken from ``ports.ports_of`` (256 bits on Zen 3 and Zen 4)."""
    mcpu = str(target.get("mcpu", ""))
    base = ZEN if mcpu.startswith("znver") else GOLDEN_COVE
    return Core(base.name, base.units, ports_of(target).fp_bits, base.issue)


# -- dependence graph -----------------------------------------------------------------------------
@dataclass
class Uop:
    """One scheduled operation: a whole instruction, or the load folded into one."""

    ins: int  # index of its instruction in the block
    ports: tuple[str, ...]
    latency: int
    hold: int  # cycles it holds its port
    preds: list  # (uop index, cycles after its issue)
    regs: frozenset = frozenset()  # the registers it reads
    loads: str | None = None  # the address operand it loads from
    stores: str | None = None  # the address operand it stores to


_LANE_CROSSING = ("perm", "broadcast", "insert", "extract", "align", "compress", "expand")


def _unit(ins: Instruction, core: Core) -> tuple[str, int, int]:
    """(unit, latency, bits) of an instruction's own operation (its folded load apart)."""
    ic, m = classify(ins), ins.mnemonic
    if ic.cls in ("fma", "branch", "int"):
        lat = 3 if m.startswith("imul") else core.units[ic.cls].latency
        return ic.cls, lat, ic.bits
    if ic.cls == "arith":
        slow = "div" in m or "sqrt" in m  # not pipelined: holds its pipe
        return "valu", 13 if slow else core.units["valu"].latency, ic.bits * (5 if slow else 1)
    if ic.cls == "shuffle":
        return "shuffle", 3 if any(s in m for s in _LANE_CROSSING) else 1, ic.bits
    if ic.cls == "load":  # a broadcast reads one element, whatever its register's width
        return ("vload" if ic.bits else "load"), 0, 0 if "broadcast" in m else ic.bits
    if ic.cls == "store":
        return ("vstore" if ic.bits else "store"), 1, ic.bits
    if m.startswith(("mov", "vmov", "vpxor", "vxor", "xor", "pxor")):
        return "move", 0, 0  # register moves and zero idioms: the renamer's, no port
    return "int", 1, 0


def _port_use(core: Core, unit: str, bits: int) -> tuple[tuple[str, ...], int]:
    u = core.units[unit]
    ports = u.wide if bits > 256 and u.wide else u.ports
    return ports, max(1, math.ceil(bits / core.pipe_bits)) if bits else 1


def _is_zero_idiom(ins: Instruction) -> bool:
    return (ins.mnemonic.startswith(("xor", "vxor", "pxor", "vpxor", "sub"))
            and len(set(ins.operands)) == 1)


def dependence_graph(instrs: Sequence[Instruction], core: Core) -> list[Uop]:
    """Uops of a basic block with their predecessors: register reads after writes (renaming
    removes the false dependences), each store after the loads and stores before it (memory
    order, conservatively: addresses are not compared), and a load after a store to the same
    address operand (a spill and its reload)."""
    uops: list[Uop] = []
    writer: dict[str, int] = {}  # register family -> uop that last wrote it
    last_store, loads_since, stored_at = [], [], {}

    def after(regs) -> list:
        return [(writer[r], uops[writer[r]].latency) for r in regs if r in writer]

    for k, ins in enumerate(instrs):
        unit, lat, bits = _unit(ins, core)
        regs = set() if _is_zero_idiom(ins) else reads(ins)
        srcs = ins.operands[:-1] if ins.dest is not None else ins.operands
        mem = next((op for op in srcs if is_memory(op)), None)
        is_load, is_store = unit in ("load", "vload"), unit in ("store", "vstore")
        preds = []
        if is_load or (mem is not None and not is_store):
            # a load of its own, or one folded into an operation: issued first, its latency
            # delays the operation that uses it
            kind = "vload" if (bits or classify(ins).bits) else "load"
            ports, hold = _port_use(core, kind, 0 if "{1to" in (mem or "") else bits)
            own = regs if is_load else set(registers(mem))
            load = Uop(k, ports, core.units[kind].latency, hold, after(own), frozenset(own), mem)
            if mem in stored_at:
                load.preds.append((stored_at[mem], 1))
            uops.append(load)
            loads_since.append(len(uops) - 1)
            if not is_load:
                preds.append((len(uops) - 1, load.latency))
        if not is_load:
            preds += after(regs)
            if is_store:
                preds += [(p, 1) for p in loads_since + last_store]
            ports, hold = _port_use(core, unit, bits)
            uops.append(Uop(k, ports, lat, hold, preds, frozenset(regs), None,
                            ins.operands[-1] if is_store else None))
            if is_store:
                last_store, loads_since = [len(uops) - 1], []
                stored_at[ins.operands[-1]] = len(uops) - 1
        for r in writes(ins):
            writer[r] = len(uops) - 1
    return uops


# -- scheduling -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class BlockSchedule:
    instructions: int
    cycles: float  # when the last result of one pass is ready (list-scheduled)
    critical_path: float  # the longest latency chain, ports unlimited
    throughput: float  # the busiest port's cycles, or uops over the issue width
    recurrence: float  # the longest loop-carried chain per pass (0 unless asked)
    issue: tuple[int, ...]  # the cycle each instruction's operation issues


def list_schedule(uops: list[Uop], core: Core) -> list[int]:
    """Greedy list scheduling: each cycle, ready uops in order of their critical path to the end
    of the block take a free port of theirs, at most ``core.issue`` of them. Returns issue
    cycles."""
    n = len(uops)
    prio = _tails(uops)
    succs: list[list] = [[] for _ in range(n)]
    waiting = [len(u.preds) for u in uops]
    for i, u in enumerate(uops):
        for p, lat in u.preds:
            succs[p].append((i, lat))
    earliest = [0] * n
    issue = [-1] * n
    pending = [(0, -prio[i], i) for i in range(n) if not waiting[i]]
    heapq.heapify(pending)
    ready: dict[tuple, list] = {}  # port set -> heap of (-priority, uop)
    free_at: dict[str, int] = {}
    t, done = 0, 0
    while done < n:
        slots = core.issue
        while slots:
            while pending and pending[0][0] <= t:  # a zero-latency move's users join this cycle
                _, neg, i = heapq.heappop(pending)
                heapq.heappush(ready.setdefault(uops[i].ports, []), (neg, i))
            # the best ready uop among port sets with a free port this cycle
            best = None
            for ports, heap in ready.items():
                if heap and (not ports or any(free_at.get(p, 0) <= t for p in ports)):
                    if best is None or heap[0] < ready[best][0]:
                        best = ports
            if best is None:
                break
            _, i = heapq.heappop(ready[best])
            if best:
                port = min(best, key=lambda p: free_at.get(p, 0))
                free_at[port] = t + uops[i].hold
            issue[i], done, slots = t, done + 1, slots - 1
            for s, lat in succs[i]:
                earliest[s] = max(earliest[s], t + lat)
                waiting[s] -= 1
                if not waiting[s]:
                    heapq.heappush(pending, (earliest[s], -prio[s], s))
        idle = not any(ready.values())
        t = max(t + 1, pending[0][0]) if idle and pending else t + 1
    return issue


def _tails(uops: list[Uop]) -> list[float]:
    """Per uop: the longest latency path from its issue to the end of the block."""
    tail = [float(max(u.latency, 1)) for u in uops]
    for i in range(len(uops) - 1, -1, -1):
        for p, lat in uops[i].preds:
            tail[p] = max(tail[p], lat + tail[i])
    return tail


def recurrence(instrs: Sequence[Instruction], uops: list[Uop]) -> float:
    """The longest chain per pass from a value on entry to the block to its last write, which
    the next pass reads: a register, or an address whose registers the block leaves alone (an
    accumulator kept in memory, loaded and stored back every pass)."""
    first_read: dict[str, list[int]] = {}
    last_write: dict[str, int] = {}
    written: set[str] = set()
    for j, u in enumerate(uops):
        mem = {"@" + u.loads} if u.loads else set()
        for r in (u.regs | mem) - written:
            first_read.setdefault(r, []).append(j)
        if u.stores:
            written.add("@" + u.stores)
            last_write["@" + u.stores] = j
        if j + 1 == len(uops) or uops[j + 1].ins != u.ins:  # the instruction's last uop writes
            for r in writes(instrs[u.ins]):
                written.add(r)
                last_write[r] = j
    moved = set().union(*(writes(i) for i in instrs))
    for r in [r for r in last_write if r.startswith("@") and set(registers(r[1:])) & moved]:
        del last_write[r]  # a pointer that moves: the next pass stores elsewhere
    best = 0.0
    for r in set(first_read) & set(last_write):
        dist = [-math.inf] * len(uops)
        for j in first_read[r]:
            dist[j] = 0.0
        for j, u in enumerate(uops):
            for p, lat in u.preds:
                dist[j] = max(dist[j], dist[p] + lat)
        end = last_write[r]
        best = max(best, dist[end] + max(uops[end].latency, 1))
    return best


def schedule_block(instrs: Sequence[Instruction], core: Core = GOLDEN_COVE,
                   carried: bool = False) -> BlockSchedule:
    """The schedule of one basic block on ``core``; ``carried``: it repeats (a loop body), so
    its loop-carried recurrence is measured too."""
    if not instrs:
        return BlockSchedule(0, 0.0, 0.0, 0.0, 0.0, ())
    uops = dependence_graph(instrs, core)
    issue = list_schedule(uops, core)
    cycles = max(t + max(u.latency, 1) for t, u in zip(issue, uops))
    pressure: dict[str, float] = {}
    for u in uops:  # each uop's port cycles spread over the ports it may use
        for p in u.ports:
            pressure[p] = pressure.get(p, 0.0) + u.hold / len(u.ports)
    throughput = max(max(pressure.values(), default=0.0), len(uops) / core.issue)
    by_ins = {u.ins: t for t, u in zip(issue, uops)}  # an instruction's own (last) uop
    return BlockSchedule(len(instrs), float(cycles), max(_tails(uops)), throughput,
                         recurrence(instrs, uops) if carried else 0.0,
                         tuple(by_ins[k] for k in range(len(instrs))))


# -- programs and features ------------------------------------------------------------------------
STATS = ("cycles", "critical_path", "throughput", "recurrence", "pipelined")
FEATURE_NAMES = (
    "invalid", *(f"{s}_per_flop" for s in STATS), "latency_ratio", "schedule_ratio", "ipc",
    "hot_share", "hot_instructions", *(f"hot_{s}" for s in STATS[:4]), "hot_latency_ratio",
    "hot_recurrence_ratio", "hot_ipc",
)
ZERO_PER_FLOP = -40.0  # log2 per FLOP of nothing (as ``roofline``)


def code_weights(prog: asm_loops.AsmProgram) -> tuple[tuple[CodeLoop, ...], np.ndarray]:
    """The program's loops and each instruction's dynamic count from the trip counts the code
    tells alone (1 for a loop it does not); ``hardware_cpu`` passes counts mapped to TIR."""
    forest = asm_loops.find_loops(prog)
    weights = loop_weights(forest.loops, [lp.trip or 1 for lp in forest.loops], forest.entry)
    n = len(prog.instructions)
    return forest.loops, instruction_weights(n, forest.loops, weights) * forest.frequency


def program_stats(prog: asm_loops.AsmProgram, loops: Sequence[CodeLoop], per_ins: np.ndarray,
                  core: Core) -> tuple[dict, dict]:
    """Execution-weighted sums of the block statistics over the program (``STATS`` and
    ``instructions``), and the same per iteration of its hottest innermost loop (the whole
    program when it has no loops), with ``share``: that loop's part of the scheduled cycles."""
    in_loop = np.zeros(len(prog.instructions), dtype=bool)
    for lp in loops:
        in_loop[sorted(lp.body)] = True
    total = dict.fromkeys((*STATS, "instructions"), 0.0)
    per_block = []
    for a, b in basic_blocks(asm_loops.flows(prog)):
        w = float(per_ins[a])
        if w <= 0:
            continue  # never reached
        s = schedule_block(prog.instructions[a:b], core, carried=bool(in_loop[a]))
        # a loop's passes overlap out of order: its cost is throughput or recurrence, not the
        # length of one pass; straight-line code pays its schedule
        piped = max(s.throughput, s.recurrence) if in_loop[a] else s.cycles
        stats = {"cycles": s.cycles, "critical_path": s.critical_path,
                 "throughput": s.throughput, "recurrence": s.recurrence, "pipelined": piped,
                 "instructions": float(s.instructions)}
        per_block.append((a, w, stats))
        for k, v in stats.items():
            total[k] += w * v
    hot = None, 0.0
    for i in innermost(loops):
        cost = sum(w * st["cycles"] for a, w, st in per_block if a in loops[i].body)
        if cost > hot[1]:
            hot = i, cost
    if hot[0] is None:
        return total, {**total, "share": 1.0}
    body, runs = loops[hot[0]].body, max(float(per_ins[loops[hot[0]].header]), 1e-30)
    one = dict.fromkeys(total, 0.0)
    for a, w, stats in per_block:
        if a in body:
            for k, v in stats.items():
                one[k] += w / runs * v
    return total, {**one, "share": hot[1] / total["cycles"] if total["cycles"] else 0.0}


def _log_ratio(a: float, b: float) -> float:
    return math.log2(a / b) if a > 0 and b > 0 else 0.0


def ilp_row(prog: asm_loops.AsmProgram, loops: Sequence[CodeLoop], per_ins: np.ndarray,
            flops: int, core: Core, scale: float = 1.0) -> np.ndarray:
    """The ``FEATURE_NAMES`` row of a program: totals as log2 cycles per FLOP (``scale`` them up
    as ``hardware_cpu.cover_workload`` does its counts), ratios as log2, hottest loop per pass."""
    total, hot = program_stats(prog, loops, per_ins, core)
    log_flops = math.log2(max(flops, 1))

    def per_flop(x: float) -> float:
        return math.log2(x * scale) - log_flops if x > 0 else ZERO_PER_FLOP

    row = [0.0, *(per_flop(total[s]) for s in STATS),
           _log_ratio(total["critical_path"], total["throughput"]),
           _log_ratio(total["cycles"], total["throughput"]),
           total["instructions"] / total["cycles"] if total["cycles"] else 0.0,
           hot["share"], math.log2(1 + hot["instructions"]),
           *(math.log2(1 + hot[s]) for s in STATS[:4]),
           _log_ratio(hot["critical_path"], hot["throughput"]),
           _log_ratio(hot["recurrence"], hot["throughput"]),
           hot["instructions"] / hot["cycles"] if hot["cycles"] else 0.0]
    return np.asarray(row, dtype=np.float32)


def invalid_row() -> np.ndarray:
    row = np.zeros(len(FEATURE_NAMES), dtype=np.float32)
    row[0] = 1.0
    return row


__all__ = ["Core", "Unit", "ZEN", "GOLDEN_COVE", "core_of", "dependence_graph",
           "list_schedule", "schedule_block", "BlockSchedule", "code_weights", "program_stats",
           "ilp_row", "FEATURE_NAMES"]
