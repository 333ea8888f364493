"""Graph features: the computation DAG of a task's TIR function, before any scheduling.

After GTuner's structural features. Nodes are the function's buffers and its blocks (pad, the
reduction, bias, activation, ...); edges run buffer -> block for every buffer a block reads and
block -> buffer for the buffer it writes. Each node carries a fixed-width feature vector:

    kind          one-hot: input buffer, output buffer, intermediate buffer, block
    op            one-hot (blocks): reduction, elementwise, broadcast, injective, pad
    dtype         one-hot of the buffer's (or the block's output) element type
    shape         log2(1 + extent) per dimension, right-aligned in ``MAX_DIMS`` slots
                  (buffers: their shape; blocks: their spatial iteration domain)
    reduce        log2(1 + extent) of each reduction iterator, in ``MAX_REDUCE`` slots
    scalars       log2 elements (or iterations), rank, reads, log2(1 + ops per iteration),
                  log2 bytes

Nodes are in topological order (each block after the buffers it reads, its output after it).
``task_graph(task)`` is the primary API (for graph neural networks); ``GraphFeatures`` flattens
a graph into a fixed-width row so table-based models can use it too.
"""
from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..measure.types import MeasureInput
from .base import FeatureExtractor
from .itervar import _const, _itemsize

KINDS = ("input", "output", "intermediate", "block")
OP_TYPES = ("reduction", "elementwise", "broadcast", "injective", "pad")
DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "int32", "other")
MAX_DIMS = 6
MAX_REDUCE = 4
SCALARS = ("log_size", "rank", "reads", "log_ops", "log_bytes")
MAX_NODES = 16  # nodes kept by the flat encoding; TIR of one fused operator has far fewer

_ARITH = {"Add", "Sub", "Mul", "Div", "FloorDiv", "Mod", "FloorMod", "Min", "Max"}
_SELECTS = {"prim.if_then_else", "tirx.if_then_else"}


def node_feature_names() -> list[str]:
    """Column names of ``TaskGraph.node_features``."""
    return ([f"kind.{k}" for k in KINDS] + [f"op.{o}" for o in OP_TYPES]
            + [f"dtype.{d}" for d in DTYPES] + [f"shape{d}" for d in range(MAX_DIMS)]
            + [f"reduce{d}" for d in range(MAX_REDUCE)] + list(SCALARS))


NODE_DIM = len(node_feature_names())


@dataclass(frozen=True, eq=False)
class TaskGraph:
    """A computation DAG: ``node_features`` (n, NODE_DIM) float32 and ``edges`` (2, E) int64
    (row 0 the producer side, row 1 the consumer side), with node names such as ``"block:pad"``
    or ``"buffer:pad"`` and, per node, its kind and (blocks only) op type."""

    names: tuple[str, ...]
    kinds: tuple[str, ...]
    op_types: tuple[str | None, ...]
    node_features: np.ndarray
    edges: np.ndarray

    @property
    def num_nodes(self) -> int:
        return len(self.names)

    @property
    def num_edges(self) -> int:
        return int(self.edges.shape[1])

    def adjacency(self) -> np.ndarray:
        """The symmetric (n, n) 0/1 matrix of neighbours, ignoring edge direction."""
        adj = np.zeros((self.num_nodes, self.num_nodes), dtype=np.float32)
        adj[self.edges[0], self.edges[1]] = 1.0
        adj[self.edges[1], self.edges[0]] = 1.0
        return adj

    def index(self, name: str) -> int:
        """The position of the node called ``name``."""
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"no node {name!r}; nodes: {', '.join(self.names)}") from None


def task_graph(task) -> TaskGraph:
    """The computation DAG of ``task``'s TIR function (it depends on the workload only)."""
    return _workload_graph(task.workload)


@functools.lru_cache(maxsize=128)
def _workload_graph(workload) -> TaskGraph:
    return prim_func_graph(workload.prim_func())


def prim_func_graph(func) -> TaskGraph:
    """The computation DAG of an unscheduled ``PrimFunc`` (root block over child blocks)."""
    blocks: list = []
    _find_blocks(func.body, blocks)
    if not blocks:
        raise ValueError("the function has no computation blocks (is it a TIR PrimFunc?)")
    params = [p.name for p in func.params]
    written = {b.writes[0].source.name for b in blocks if b.writes}
    names: list[str] = []
    kinds: list[str] = []
    ops: list[str | None] = []
    rows: list[np.ndarray] = []
    edges: list[tuple[int, int]] = []
    position: dict[str, int] = {}

    def buffer_node(buf) -> int:
        key = f"buffer:{buf.name}"
        if key not in position:
            kind = ("intermediate" if buf.name not in params
                    else "output" if buf.name in written else "input")
            position[key] = len(names)
            names.append(key)
            kinds.append(kind)
            ops.append(None)
            rows.append(_buffer_row(buf, kind))
        return position[key]

    for block in blocks:
        out_names = {w.source.name for w in block.writes}
        inputs = [buffer_node(r.source) for r in block.reads if r.source.name not in out_names]
        op = op_type(block)
        me = len(names)
        names.append(f"block:{block.name_hint}")
        kinds.append("block")
        ops.append(op)
        rows.append(_block_row(block, op, len(inputs)))
        edges.extend((i, me) for i in dict.fromkeys(inputs))
        edges.extend((me, buffer_node(w.source)) for w in block.writes)
    features = np.stack(rows).astype(np.float32)
    edge_array = np.array(edges, dtype=np.int64).reshape(-1, 2).T.copy()
    features.setflags(write=False)
    edge_array.setflags(write=False)
    return TaskGraph(tuple(names), tuple(kinds), tuple(ops), features, edge_array)


def op_type(block) -> str:
    """Classify a block by its iterators and body: reduction if it has a reduction iterator, pad
    if its value selects (``if_then_else``), elementwise if every input is read at the output's
    indices, broadcast if inputs use a subset of them in order, injective otherwise."""
    if any(int(iv.iter_type) == 2 for iv in block.iter_vars):
        return "reduction"
    if _selects(getattr(block.body, "value", None)):
        return "pad"
    if not block.writes:
        return "injective"
    out_name = block.writes[0].source.name
    out_idx = [str(r.min) for r in block.writes[0].region]
    kind = "elementwise"
    for read in block.reads:
        if read.source.name == out_name:
            continue
        idx = [r.min for r in read.region]
        if [str(i) for i in idx] == out_idx:
            continue
        if all(type(i).__name__ == "Var" for i in idx) and _in_order([str(i) for i in idx], out_idx):
            kind = "broadcast"
            continue
        return "injective"
    return kind


class GraphFeatures(FeatureExtractor):
    """The flat, fixed-width encoding of ``task_graph(task)``: node and edge counts, the mean
    node feature vector, then the feature vectors of the first ``max_nodes`` nodes (zero padded).
    Every config of a task gets the same row, so it tells tasks apart, not configs."""

    name = "graph"

    def __init__(self, max_nodes: int = MAX_NODES, cache_size: int = 256):
        if max_nodes < 1:
            raise ValueError(f"max_nodes must be positive, got {max_nodes}")
        self.max_nodes = max_nodes
        self.cache_size = cache_size
        self._rows: OrderedDict[str, np.ndarray] = OrderedDict()

    @property
    def dim(self) -> int:
        return 3 + NODE_DIM * (1 + self.max_nodes)

    def empty_dim(self) -> int:
        return self.dim

    def graph(self, task) -> TaskGraph:
        """``task_graph(task)``."""
        return task_graph(task)

    def extract(self, inputs: Sequence[MeasureInput]) -> np.ndarray:
        rows = [self._row(inp.task) for inp in inputs]
        if not rows:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack(rows).astype(np.float32, copy=False)

    def _row(self, task) -> np.ndarray:
        row = self._rows.get(task.key)
        if row is not None:
            self._rows.move_to_end(task.key)
            return row
        g = task_graph(task)
        kept = g.node_features[: self.max_nodes]
        padded = np.zeros((self.max_nodes, NODE_DIM), dtype=np.float32)
        padded[: len(kept)] = kept
        row = np.concatenate([[g.num_nodes, g.num_edges, g.kinds.count("block")],
                              g.node_features.mean(axis=0), padded.ravel()]).astype(np.float32)
        row.setflags(write=False)
        self._rows[task.key] = row
        if len(self._rows) > self.cache_size:
            self._rows.popitem(last=False)
        return row


# -- node rows ------------------------------------------------------------------------------------
def _buffer_row(buf, kind: str) -> np.ndarray:
    shape = [_const(d) for d in buf.shape]
    dtype = str(buf.dtype)
    elements = math.prod(shape)
    row = _blank(kind, None, dtype, shape, [])
    row[-5:] = [math.log2(max(elements, 1)), len(shape), 0.0, 0.0,
                math.log2(max(elements * _itemsize(dtype), 1))]
    return row


def _block_row(block, op: str, reads: int) -> np.ndarray:
    spatial = [_const(iv.dom.extent) for iv in block.iter_vars if int(iv.iter_type) != 2]
    reduce = [_const(iv.dom.extent) for iv in block.iter_vars if int(iv.iter_type) == 2]
    dtype = str(block.writes[0].source.dtype) if block.writes else "other"
    iterations = math.prod(spatial) * math.prod(reduce)
    row = _blank("block", op, dtype, spatial, reduce)
    row[-5:] = [math.log2(max(iterations, 1)), len(spatial) + len(reduce), reads,
                math.log2(1 + _ops(getattr(block.body, "value", None))), 0.0]
    return row


def _blank(kind: str, op: str | None, dtype: str, shape: list[int], reduce: list[int]) -> np.ndarray:
    row = np.zeros(NODE_DIM, dtype=np.float32)
    row[KINDS.index(kind)] = 1.0
    at = len(KINDS)
    if op is not None:
        row[at + OP_TYPES.index(op)] = 1.0
    at += len(OP_TYPES)
    row[at + (DTYPES.index(dtype) if dtype in DTYPES else len(DTYPES) - 1)] = 1.0
    at += len(DTYPES)
    dims = shape[-MAX_DIMS:]  # right-aligned: the innermost dimension always has the last slot
    row[at + MAX_DIMS - len(dims): at + MAX_DIMS] = [math.log2(1 + d) for d in dims]
    at += MAX_DIMS
    red = reduce[:MAX_REDUCE]
    row[at: at + len(red)] = [math.log2(1 + d) for d in red]
    return row


# -- TIR helpers ----------------------------------------------------------------------------------
def _find_blocks(stmt, out: list) -> None:
    """The child blocks under the root block, in program order."""
    if stmt is None:
        return
    kind = type(stmt).__name__
    if kind == "SBlockRealize":
        block = stmt.block
        if block.name_hint == "root" and not block.iter_vars:
            _find_blocks(block.body, out)
        else:
            out.append(block)
    elif kind == "SeqStmt":
        for s in stmt.seq:
            _find_blocks(s, out)
    elif kind == "IfThenElse":
        _find_blocks(stmt.then_case, out)
        _find_blocks(stmt.else_case, out)
    elif hasattr(stmt, "body"):
        _find_blocks(stmt.body, out)


def _selects(expr) -> bool:
    if expr is None:
        return False
    name = type(expr).__name__
    if name == "Select" or (name == "Call" and getattr(expr.op, "name", "") in _SELECTS):
        return True
    if name in _ARITH:
        return _selects(expr.a) or _selects(expr.b)
    if name == "Cast":
        return _selects(expr.value)
    if name == "Call":
        return any(_selects(a) for a in expr.args)
    return False


def _ops(expr) -> int:
    """Arithmetic operations of a block's value, index arithmetic excluded."""
    if expr is None:
        return 0
    name = type(expr).__name__
    if name in _ARITH:
        return 1 + _ops(expr.a) + _ops(expr.b)
    if name == "Cast":
        return _ops(expr.value)
    if name == "Select":
        return 1 + _ops(expr.true_value) + _ops(expr.false_value)
    if name == "Call":
        return 1 + sum(_ops(a) for a in expr.args)
    return 0  # loads, constants, variables


def _in_order(sub: list[str], full: list[str]) -> bool:
    it = iter(full)
    return all(s in it for s in sub)
