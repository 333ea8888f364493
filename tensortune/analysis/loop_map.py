"""Loops of lowered TIR, the map from code loops (``cfg``) to them, and dynamic counts.

After Tuna's Algorithm 1: the IR keeps the loop structure and the trip counts, the generated code
keeps the instructions. The natural loops of the code and the ``For`` loops of the lowered TIR
are both taken in pre-order; each code loop maps to an IR loop inside the IR loop of its nearest
mapped ancestor, after the IR loops its earlier siblings took, of the same kind (parallel or not)
and doing floating-point work exactly when the code loop does: the first whose extent equals
the trip count read from the code, or else (a code trip count that divides the extent: a
partially unrolled loop) the previous sibling's IR loop again or the first such IR loop; when
the code gives no trip count, the first candidate in order. The compiler fully unrolls some IR
loops (they have no code loop, their factor is already in the static count), so the map is a
heuristic: a code loop without a trip count of its own and without an IR loop counts once.

A code loop's weight (how many times its body runs) is its trip count times its parent's weight
times how often the parent's iteration enters it; an instruction's dynamic count is the weight
of its innermost loop times its static frequency within one iteration (see ``cfg``).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .cfg import CodeLoop

# load-to-use distance bins (instructions from a load to its first consumer; 0 = the load is an
# operand of the consumer itself), after XFEATUR's implicit feature
LOAD_USE_BINS = ((0, 0), (1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, None))
LOAD_USE_NAMES = tuple(f"load_use_{lo}" if hi == lo else f"load_use_{lo}+" if hi is None
                       else f"load_use_{lo}-{hi}" for lo, hi in LOAD_USE_BINS)
_KINDS = {0: "serial", 1: "parallel", 2: "vectorized", 3: "unrolled", 4: "thread_binding"}


@dataclass(frozen=True)
class IRLoop:
    """A ``For`` loop of lowered TIR (pre-order position in its list)."""

    name: str
    extent: int
    kind: str
    depth: int
    parent: int  # index of the enclosing IR loop, -1 at the top
    compute: bool = False  # its body does floating-point arithmetic (not only copies)


# -- IR side --------------------------------------------------------------------------------------
def ir_loops(stmt, min_extent: int = 2) -> list[IRLoop]:
    """The ``For`` loops of a lowered TIR statement in pre-order, those of extent ``min_extent``
    or more (shorter ones generate no code loop)."""
    out: list[IRLoop] = []
    _collect(stmt, -1, 0, out, min_extent)
    return out


def _collect(stmt, parent: int, depth: int, out: list, min_extent: int) -> bool:
    """Append the loops of ``stmt``; whether it does floating-point arithmetic."""
    if stmt is None:
        return False
    kind = type(stmt).__name__
    if kind == "For":
        extent = _const(stmt.extent)
        if extent is None or extent < min_extent:
            return _collect(stmt.body, parent, depth, out, min_extent)
        out.append(IRLoop(str(stmt.loop_var.name), extent, _KINDS.get(int(stmt.kind), "serial"),
                          depth, parent))
        me = len(out) - 1
        compute = _collect(stmt.body, me, depth + 1, out, min_extent)
        if compute:
            out[me] = dataclasses.replace(out[me], compute=True)
        return compute
    if kind == "SeqStmt":
        return any([_collect(s, parent, depth, out, min_extent) for s in stmt.seq])
    if kind == "IfThenElse":
        return any([_collect(stmt.then_case, parent, depth, out, min_extent),
                    _collect(stmt.else_case, parent, depth, out, min_extent)])
    if kind == "BufferStore":
        return _fp_arith(stmt.value)
    found = False
    for attr in ("body", "block", "init"):
        child = getattr(stmt, attr, None)
        if child is not None and not isinstance(child, (int, float, str)):
            found |= _collect(child, parent, depth, out, min_extent)
    return found


_ARITH = {"Add", "Sub", "Mul", "Div", "Min", "Max", "FloorDiv"}
_MATH = ("exp", "log", "sqrt", "tanh", "sigmoid", "fma", "pow", "erf", "sin", "cos")


def _fp_arith(expr) -> bool:
    """Whether an expression computes on floating-point values (beyond loading, casting and
    selecting, as padding does)."""
    name = type(expr).__name__
    if name in ("BufferLoad", "TensorLoad"):
        return False
    floating = str(getattr(expr, "ty", "")).startswith(("float", "bfloat"))
    if floating and (name in _ARITH or name == "Call" and any(
            m in str(getattr(expr.op, "name", "")) for m in _MATH)):
        return True
    for attr in ("a", "b", "value", "condition", "true_value", "false_value"):
        child = getattr(expr, attr, None)
        if child is not None and not isinstance(child, (int, float, str)) and _fp_arith(child):
            return True
    return any(_fp_arith(arg) for arg in getattr(expr, "args", ()) or ())


def thread_extents(stmt) -> dict[str, int]:
    """``thread_extent`` attributes of a lowered GPU kernel: ``{"blockIdx.x": 8, ...}``."""
    out: dict[str, int] = {}
    _threads(stmt, out)
    return out


def _threads(stmt, out: dict) -> None:
    if stmt is None:
        return
    kind = type(stmt).__name__
    if kind == "AttrStmt" and stmt.attr_key == "thread_extent":
        tag = str(stmt.node.thread_tag)
        value = _const(stmt.value)
        if value is not None:
            out[tag] = max(out.get(tag, 1), value)
    if kind == "SeqStmt":
        for s in stmt.seq:
            _threads(s, out)
        return
    if kind == "IfThenElse":
        _threads(stmt.then_case, out)
        _threads(stmt.else_case, out)
        return
    body = getattr(stmt, "body", None)
    if body is not None:
        _threads(body, out)


def _const(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# -- code side ------------------------------------------------------------------------------------
def map_loops(code: Sequence[CodeLoop], ir: Sequence[IRLoop]) -> list[int | None]:
    """For each code loop (pre-order), the index of its IR loop or ``None``.

    Tuna's Algorithm 1 with nesting: sibling code loops take IR loops in order (see ``_choose``),
    each one inside the IR loop of its nearest mapped ancestor and after the subtree of its
    previous mapped sibling; a remainder copy takes the IR loop of the loop it copies.
    """
    children: dict[int, list[int]] = {i: [] for i in range(-1, len(code))}
    for i, loop in enumerate(code):
        children[loop.parent].append(i)
    # pre-order: the subtree of IR loop j is ir[j + 1:subtree_end[j]]
    subtree_end = list(range(1, len(ir) + 1))
    for j in range(len(ir) - 1, -1, -1):
        if ir[j].parent >= 0:
            subtree_end[ir[j].parent] = max(subtree_end[ir[j].parent], subtree_end[j])
    mapping: list[int | None] = [None] * len(code)

    def visit(ids: list[int], lo: int, hi: int) -> int:
        at, previous = lo, None
        for ci in ids:
            loop = code[ci]
            if loop.copy_of >= 0 and mapping[loop.copy_of] is not None:
                pick = mapping[loop.copy_of]
            else:
                pick = _choose(loop, ir, at, hi, previous)
            if pick is None:
                at = visit(children[ci], at, hi)
            else:
                mapping[ci] = previous = pick
                visit(children[ci], pick + 1, subtree_end[pick])
                at = max(at, subtree_end[pick])
        return at

    visit(children[-1], 0, len(ir))
    return mapping


def _choose(loop: CodeLoop, ir: Sequence[IRLoop], lo: int, hi: int, previous: int | None
            ) -> int | None:
    """The IR loop in ``ir[lo:hi]`` for a code loop, among those that compute when it computes
    and are parallel when it is (any kind, if no parallel one is left: TVM drops a parallel
    loop of one iteration but still launches its body): with a trip count, the first of equal
    extent, else the previous sibling's IR loop again if the trip count divides it (the copies
    of a fully unrolled outer loop, each partially unrolled), else the first the trip count
    divides; without a trip count, the first one in order."""
    parallel = loop.kind == "parallel"
    if parallel and not any(ir[j].kind == "parallel" for j in range(lo, hi)):
        parallel = None

    def fits(j: int) -> bool:
        kind_ok = parallel is None or (ir[j].kind == "parallel") == parallel
        return kind_ok and ir[j].compute == loop.compute

    cands = [j for j in range(lo, hi) if fits(j)]
    if loop.trip is None:
        return cands[0] if cands else None
    exact = [j for j in cands if ir[j].extent == loop.trip]
    if exact:
        return exact[0]
    if previous is not None and fits(previous) and ir[previous].extent % max(loop.trip, 1) == 0:
        return previous
    partial = [j for j in cands if loop.trip > 1 and ir[j].extent % loop.trip == 0
               and ir[j].extent > loop.trip]
    return partial[0] if partial else None


def parallel_split(extent: int, threads: int, unroll: int) -> tuple[int, int]:
    """Iterations summed over threads of a parallel loop's main (unrolled ``unroll`` times) and
    remainder code loops, when TVM gives each of ``threads`` tasks a chunk of ``extent``."""
    threads = max(threads, 1)
    chunk = -(-extent // threads)
    main = rest = 0
    for t in range(threads):
        n = max(min(chunk, extent - t * chunk), 0)
        main += n // unroll
        rest += n % unroll
    return main, rest


def loop_trips(code: Sequence[CodeLoop], ir: Sequence[IRLoop], mapping: Sequence[int | None],
               threads: int = 1) -> list[int]:
    """Trip count of each code loop, summed over threads for parallel loops: its own when the
    code tells it, else its IR loop's extent (split between an unrolled loop and its remainder
    copy for a parallel loop), else 1."""
    out = []
    for loop, j in zip(code, mapping):
        if j is not None and ir[j].kind == "parallel" and loop.trip is None:
            main = code[loop.copy_of] if loop.copy_of >= 0 else loop
            full, rest = parallel_split(ir[j].extent, threads, max(main.unroll, 1))
            out.append(rest if loop.copy_of >= 0 else full)
        elif loop.trip is not None:
            out.append(max(loop.trip, 1))
        elif j is not None:
            out.append(ir[j].extent)
        else:
            out.append(1)
    return out


def loop_weights(code: Sequence[CodeLoop], trips: Sequence[int], entry=None) -> list[float]:
    """How many times each loop's body runs: its trip count times its parent's weight times how
    often it is entered per iteration of its parent (``entry``, 1 if not given)."""
    weights: list[float] = []
    for i, (loop, trip) in enumerate(zip(code, trips)):
        outer = weights[loop.parent] if loop.parent >= 0 else 1.0
        weights.append(outer * trip * (1.0 if entry is None else float(entry[i])))
    return weights


def instruction_weights(n: int, code: Sequence[CodeLoop], weights: Sequence[float]) -> np.ndarray:
    """Dynamic count of each of ``n`` instructions (1 outside loops)."""
    out = np.ones(n, dtype=np.float64)
    for loop, w in zip(code, weights):  # pre-order: inner loops overwrite outer ones
        out[sorted(loop.body)] = w
    return out


def innermost(code: Sequence[CodeLoop]) -> list[int]:
    """Indices of the loops that contain no other loop."""
    has_child = {loop.parent for loop in code}
    return [i for i in range(len(code)) if i not in has_child]


def load_use_histogram(distances: Sequence[tuple[int, float]]) -> np.ndarray:
    """Fractions of loads per ``LOAD_USE_BINS`` bin from ``(distance, weight)`` pairs."""
    hist = np.zeros(len(LOAD_USE_BINS), dtype=np.float64)
    for d, w in distances:
        for b, (lo, hi) in enumerate(LOAD_USE_BINS):
            if d >= lo and (hi is None or d <= hi):
                hist[b] += w
                break
    total = hist.sum()
    return hist / total if total > 0 else hist


def log2p(x: float) -> float:
    """``log2(1 + x)`` for non-negative counts."""
    return math.log2(1.0 + max(float(x), 0.0))
