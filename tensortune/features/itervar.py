"""Itervar features: how the loop nest of the scheduled main computation walks memory.

After AutoTVM's itervar features. The innermost statement with the most FLOPs (the reduction
update) is found in the scheduled TIR; for each loop around it, outermost to innermost, the row
holds the loop's extent and kind and, for every buffer the statement touches (output first, then
inputs), the access stride along that loop, the bytes touched by the loops from that level inward,
and the reuse ratio (iterations below / distinct elements). A few global scalars follow.

Index expressions are evaluated numerically (the Python side of TVM 0.27 has no substitution or
visitor helpers): the footprint of each loop is the span of each buffer dimension while only that
loop moves, and spans of nested loops add up, which is exact for tiled (affine) indices.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np

from ..measure.types import MeasureInput
from .base import CachedExtractor

MAX_LEVELS = 12
MAX_BUFFERS = 4
KINDS = ("serial", "parallel", "vectorized", "unrolled")  # tirx.ForKind 0..3, in that order
BUFFER_FEATURES = ("stride", "bytes", "reuse")
GLOBAL_FEATURES = ("applied", "log_flops", "log_parallel", "log_vector", "log_auto_unroll",
                   "log_unrolled", "log_iters", "log_other_iters", "n_loops")
_MAX_POINTS = 1024  # points per loop at which index expressions are evaluated

_BINOPS = {
    "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul,
    "FloorDiv": operator.floordiv, "FloorMod": operator.mod,
    # truncating division equals flooring division on the non-negative indices of loop nests
    "Div": operator.floordiv, "Mod": operator.mod,
    "Min": np.minimum, "Max": np.maximum,
}
_ARITH = {"Add", "Sub", "Mul", "Div", "FloorDiv", "Mod", "FloorMod", "Min", "Max"}


class _Opaque(Exception):
    """An index expression this evaluator does not model."""


@dataclass(frozen=True)
class Loop:
    var: object
    extent: int
    kind: int
    auto_unroll: int


@dataclass(frozen=True)
class Access:
    buffer: str
    shape: tuple[int, ...]
    itemsize: int
    indices: tuple


@dataclass(frozen=True)
class Statement:
    """One buffer store with its enclosing loops and the definitions its indices need."""

    loops: tuple[Loop, ...]
    defs: dict  # block iterator / bound var (its ``__chandle__()``) -> defining expression
    accesses: tuple[Access, ...]  # output first, then each distinct input buffer
    flops: int  # arithmetic operations per iteration

    @property
    def iterations(self) -> int:
        return math.prod(loop.extent for loop in self.loops)


def feature_names(max_levels: int = MAX_LEVELS, max_buffers: int = MAX_BUFFERS) -> list[str]:
    """Column names: globals, then ``L{level}.extent``, ``L{level}.{kind}``, ``L{level}.B{b}.{feature}``.

    Levels are right-aligned: the innermost loop is always ``L{max_levels-1}``.
    """
    names = list(GLOBAL_FEATURES)
    for lv in range(max_levels):
        names.append(f"L{lv}.extent")
        names.extend(f"L{lv}.{k}" for k in KINDS)
        for b in range(max_buffers):
            names.extend(f"L{lv}.B{b}.{f}" for f in BUFFER_FEATURES)
    return names


def collect_statements(func) -> list[Statement]:
    """Every buffer store of a scheduled ``PrimFunc`` with its loop nest."""
    out: list[Statement] = []
    _walk(func.body, (), {}, out)
    return out


def main_statement(statements: list[Statement]) -> Statement | None:
    """The store doing the most arithmetic (the reduction update); ties go to more iterations."""
    if not statements:
        return None
    return max(statements, key=lambda s: (s.iterations * s.flops, s.iterations))


def loop_nest_features(func, flops: int, max_levels: int = MAX_LEVELS,
                       max_buffers: int = MAX_BUFFERS) -> np.ndarray:
    """The itervar feature row of a scheduled ``PrimFunc`` (see ``feature_names``)."""
    per_level = 1 + len(KINDS) + max_buffers * len(BUFFER_FEATURES)
    row = np.zeros(len(GLOBAL_FEATURES) + max_levels * per_level, dtype=np.float32)
    row[0] = 1.0
    row[1] = math.log2(max(flops, 1))
    statements = collect_statements(func)
    main = main_statement(statements)
    if main is None:
        return row
    loops = main.loops
    n = len(loops)
    parallel = math.prod(lp.extent for lp in loops if lp.kind == 1)
    vectorized = [lp.extent for lp in loops if lp.kind == 2]
    unrolled = math.prod(lp.extent for lp in loops if lp.kind == 3)
    others = sum(s.iterations for s in statements if s is not main)
    row[2:9] = [math.log2(parallel), math.log2(vectorized[-1]) if vectorized else 0.0,
                math.log2(1 + max((lp.auto_unroll for lp in loops), default=0)),
                math.log2(unrolled), math.log2(max(main.iterations, 1)), math.log2(1 + others), n]

    # iterations of the loops from level i inward
    below = np.ones(n + 1)
    for i in range(n - 1, -1, -1):
        below[i] = below[i + 1] * loops[i].extent
    profiles = [access_profile(a, loops, main.defs) for a in main.accesses[:max_buffers]]
    levels = _kept_levels(loops, max_levels)
    offset = len(GLOBAL_FEATURES) + (max_levels - len(levels)) * per_level
    for slot, i in enumerate(levels):
        base = offset + slot * per_level
        loop = loops[i]
        row[base] = math.log2(max(loop.extent, 1))
        if 0 <= loop.kind < len(KINDS):
            row[base + 1 + loop.kind] = 1.0
        for b, (access, prof) in enumerate(zip(main.accesses, profiles)):
            if prof is None:
                continue
            spans, strides = prof
            extents = np.minimum(1 + spans[i:].sum(axis=0), access.shape)
            elements = float(np.prod(extents))
            at = base + 1 + len(KINDS) + b * len(BUFFER_FEATURES)
            row[at] = math.log2(1 + abs(strides[i]))
            row[at + 1] = math.log2(1 + elements * access.itemsize)
            row[at + 2] = math.log2(max(below[i] / elements, 1.0))
    return row


class IterVarFeatures(CachedExtractor):
    """Loop-nest features of ``apply_config(task, config)``; invalid configs give a zero row.

    Applying a config costs a few milliseconds, so rows are cached per (task key, config).
    The width is the same for every task: ``len(feature_names(max_levels, max_buffers))``.
    """

    name = "itervar"

    def __init__(self, max_levels: int = MAX_LEVELS, max_buffers: int = MAX_BUFFERS,
                 cache_size: int = 50_000):
        super().__init__(cache_size)
        self.max_levels = max_levels
        self.max_buffers = max_buffers

    @property
    def dim(self) -> int:
        return len(feature_names(self.max_levels, self.max_buffers))

    def _compute(self, inp: MeasureInput) -> np.ndarray:
        sch = self.scheduled(inp)
        if sch is None:
            return np.zeros(self.dim, dtype=np.float32)  # "applied" = 0 marks it
        return loop_nest_features(sch.mod["main"], inp.task.workload.flops,
                                  self.max_levels, self.max_buffers)


# -- the walker ---------------------------------------------------------------------------------
def _walk(stmt, loops: tuple, defs: dict, out: list) -> None:
    if stmt is None:
        return
    kind = type(stmt).__name__
    if kind == "For":
        ann = stmt.annotations
        unroll = int(ann["pragma_auto_unroll_max_step"]) if "pragma_auto_unroll_max_step" in ann else 0
        loop = Loop(stmt.loop_var, _const(stmt.extent), int(stmt.kind), unroll)
        _walk(stmt.body, loops + (loop,), defs, out)
    elif kind == "SeqStmt":
        for s in stmt.seq:
            _walk(s, loops, defs, out)
    elif kind == "SBlockRealize":
        block = stmt.block
        inner = dict(defs)
        for iv, value in zip(block.iter_vars, stmt.iter_values):
            inner[iv.var.__chandle__()] = value
        _walk(block.init, loops, inner, out)
        _walk(block.body, loops, inner, out)
    elif kind == "BufferStore":
        out.append(_statement(stmt, loops, defs))
    elif kind == "IfThenElse":
        _walk(stmt.then_case, loops, defs, out)
        _walk(stmt.else_case, loops, defs, out)
    elif kind == "Bind":  # defines its var for the statements that follow (or its body)
        defs[stmt.var.__chandle__()] = stmt.value
        _walk(getattr(stmt, "body", None), loops, defs, out)
    elif hasattr(stmt, "body"):  # AttrStmt, While, SBlock, ...
        _walk(stmt.body, loops, defs, out)


def _statement(store, loops: tuple, defs: dict) -> Statement:
    loads: list = []
    flops = _scan(store.value, loads)
    out = store.buffer
    accesses = [_access(out, store.indices)]
    seen = {out.name}
    for load in loads:
        if load.source.name not in seen:
            seen.add(load.source.name)
            accesses.append(_access(load.source, load.indices))
    return Statement(loops, defs, tuple(accesses), flops)


def _access(buffer, indices) -> Access:
    shape = tuple(_const(d) for d in buffer.shape)
    return Access(buffer.name, shape, _itemsize(str(buffer.dtype)), tuple(indices))


def _scan(expr, loads: list) -> int:
    """Arithmetic operations of a stored value; collects the loads it reads."""
    name = type(expr).__name__
    if name in ("TensorLoad", "BufferLoad"):
        loads.append(expr)
        return 0
    if name in _ARITH:
        own = 0 if str(expr.ty).startswith(("int", "uint", "bool")) else 1
        return own + _scan(expr.a, loads) + _scan(expr.b, loads)
    if name == "Cast":
        return _scan(expr.value, loads)
    if name == "Select":
        return (_scan(expr.condition, loads) + _scan(expr.true_value, loads)
                + _scan(expr.false_value, loads))
    if name == "Call":
        return 1 + sum(_scan(a, loads) for a in expr.args)
    return 0


# -- numeric evaluation of indices ------------------------------------------------------------------
def _eval(expr, env: dict, defs: dict):
    # ``env`` and ``defs`` are keyed by the variables' object addresses: a Var read from the IR
    # is a new Python object each time, and a dict keyed by Vars compared them with ``==``
    # (which builds an expression): a third of the cheap features' time
    name = type(expr).__name__
    if name == "Var":
        key = expr.__chandle__()
        if key in env:
            return env[key]
        if key in defs:
            return _eval(defs[key], env, defs)
        raise _Opaque(f"free variable {expr}")
    if name == "IntImm":
        return int(expr.value)
    op = _BINOPS.get(name)
    if op is not None:
        return op(_eval(expr.a, env, defs), _eval(expr.b, env, defs))
    if name == "Cast":
        return _eval(expr.value, env, defs)
    raise _Opaque(name)


def access_profile(access: Access, loops: tuple, defs: dict):
    """Per loop: the span of each index dimension while only that loop moves, and the stride of
    the row-major address for one step of it. ``None`` if an index is not modelled."""
    n, nd = len(loops), len(access.shape)
    spans = np.zeros((n, nd))
    strides = np.zeros(n)
    weights = np.ones(nd)
    for d in range(nd - 2, -1, -1):
        weights[d] = weights[d + 1] * access.shape[d + 1]
    keys = [loop.var.__chandle__() for loop in loops]
    env = dict.fromkeys(keys, 0)
    try:
        for i, (loop, key) in enumerate(zip(loops, keys)):
            if loop.extent <= 1:
                continue
            points = _points(loop.extent)
            env[key] = points
            values = [np.broadcast_to(np.asarray(_eval(ix, env, defs)), points.shape)
                      for ix in access.indices]
            env[key] = 0
            for d, v in enumerate(values):
                spans[i, d] = v.max() - v.min()
            strides[i] = sum(w * float(v[1] - v[0]) for w, v in zip(weights, values))
    except _Opaque:
        return None
    return spans, strides


def _points(extent: int) -> np.ndarray:
    """Loop values 0, 1, ... (all of them for short loops, an even sample for long ones)."""
    if extent <= _MAX_POINTS:
        return np.arange(extent, dtype=np.int64)
    sample = np.linspace(0, extent - 1, _MAX_POINTS).astype(np.int64)
    return np.unique(np.concatenate([[0, 1], sample]))


def _kept_levels(loops: tuple, max_levels: int) -> list[int]:
    """Indices of the loops that get a feature slot: all of them if they fit; otherwise unit
    loops are dropped outermost first, then the outermost of the rest."""
    keep = list(range(len(loops)))
    for i in range(len(loops)):
        if len(keep) <= max_levels:
            break
        if loops[i].extent == 1:
            keep.remove(i)
    return keep[-max_levels:]


def _const(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 1  # a symbolic extent: counted as one iteration


def _itemsize(dtype: str) -> int:
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        digits = "".join(ch for ch in dtype.split("x")[0] if ch.isdigit())
        return max(int(digits or 32) // 8, 1)
