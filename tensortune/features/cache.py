"""Cache features: Tuna's data-movement model over the scheduled loop nest, per cache level.

Tuna (seed 001, algorithm 2) estimates how many bytes a loop nest moves into a cache of a given
capacity by walking the loop tree bottom-up: while one iteration of a loop touches no more than
the cache holds, the data each buffer moves across all its iterations is just its footprint
(whatever is touched again is still there); at the first loop whose single iteration overflows
the cache, reuse across iterations is lost and the movement of one iteration is paid once per
iteration, for that loop and every loop outside it. Footprints come from the same numeric index
evaluation as ``itervar`` (``access_profile``).

The model is applied to every store statement of the scheduled function (packing copies and
write-backs included: a config that packs a whole weight tensor per call pays for it here) at
each level of the target's cache hierarchy. Each core has its own L1 and L2, so the parallel
loop is split into one part per core (no reuse across cores) and a serial part each core walks.

A row holds, per level, the bytes moved in per FLOP (all statements; and per buffer of the main
statement) and the cycles per FLOP the next level's bandwidth needs to deliver them, the largest
of those (the memory bound) and which level binds, and the compulsory traffic (the function's
arguments, each moved once) per FLOP. Everything is log2, restated per FLOP so that tasks of different sizes compare.
Nothing is compiled: the row needs only the scheduled TIR, a few milliseconds per candidate.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..measure.types import MeasureInput
from .base import CachedExtractor
from .itervar import (Statement, _const, _itemsize, access_profile, collect_statements,
                      main_statement)

KB, MB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class CacheHierarchy:
    """Per-core cache capacities (bytes; ``l3`` is one core's share) and the bandwidth (bytes
    per cycle per core) at which each level is refilled from the one below it."""

    l1: int = 32 * KB
    l2: int = 1 * MB
    l3: int = 2 * MB
    fill_l1: float = 64.0  # from L2
    fill_l2: float = 32.0  # from L3
    fill_l3: float = 8.0  # from DRAM


# What LLVM's -mcpu names say of the cache hierarchy (vendor data sheets); others get the default.
HIERARCHIES = {
    "znver3": CacheHierarchy(32 * KB, 512 * KB, 4 * MB),
    "znver4": CacheHierarchy(32 * KB, 1 * MB, 4 * MB),
    "znver5": CacheHierarchy(48 * KB, 1 * MB, 4 * MB),
    "skylake-avx512": CacheHierarchy(32 * KB, 1 * MB, 1408 * KB),
    "cascadelake": CacheHierarchy(32 * KB, 1 * MB, 1408 * KB),
    "icelake-server": CacheHierarchy(48 * KB, 1280 * KB, 1536 * KB),
    # LLVM names this project's KVM Xeons (family 6 model 167: Sapphire Rapids-class, 2 MiB of
    # L2 per core) "rocketlake", and data/cpu.jsonl.gz carries that name; a real Rocket Lake
    # desktop has 512 KiB of L2, but no project machine is one
    "rocketlake": CacheHierarchy(48 * KB, 2 * MB, 1920 * KB),
    "sapphirerapids": CacheHierarchy(48 * KB, 2 * MB, 1920 * KB),
    "emeraldrapids": CacheHierarchy(48 * KB, 2 * MB, 2560 * KB),
    "graniterapids": CacheHierarchy(48 * KB, 2 * MB, 4 * MB),
}
LEVELS = ("l1", "l2", "l3")
MAIN_BUFFERS = 3  # output, then the first two inputs of the main statement
FEATURE_NAMES = (
    "applied",
    *(f"{lv}_bytes_per_flop" for lv in LEVELS),
    *(f"{lv}_B{b}_bytes_per_flop" for lv in LEVELS for b in range(MAIN_BUFFERS)),
    *(f"{lv}_cycles_per_flop" for lv in LEVELS),
    "memory_cycles_per_flop", "binding_level", "compulsory_bytes_per_flop",
)
ZERO = -40.0  # log2 per FLOP of nothing moved


def hierarchy_of(target: dict) -> CacheHierarchy:
    """The cache hierarchy of an LLVM CPU target, by its ``mcpu``."""
    return HIERARCHIES.get(str(target.get("mcpu", "")), CacheHierarchy())


def data_movement(extents, footprints: np.ndarray, capacity: float,
                  private_from: int | None = None) -> np.ndarray:
    """Bytes each buffer moves into a cache of ``capacity`` bytes (Tuna's algorithm 2).

    ``extents[i]`` is loop i's trip count, outermost first; ``footprints[i, b]`` the bytes of
    buffer b touched by loops i and inward (row ``len(extents)``: one iteration of the body).
    Loops at and outside ``private_from`` get no reuse across their iterations (one cache each).
    """
    n = len(extents)
    moved = footprints[n].astype(np.float64)
    reuse = True
    for i in range(n - 1, -1, -1):
        fits = footprints[i + 1].sum() <= capacity
        if reuse and fits and (private_from is None or i > private_from):
            moved = footprints[i].astype(np.float64)
        else:
            reuse = False
            moved = moved * extents[i]
    return moved


def statement_nest(stmt: Statement, cores: int):
    """``(extents, footprints, private_from)`` of a statement's nest for ``data_movement``, the
    first parallel loop split into a per-core part and a serial part; None if an index of the
    statement is not modelled."""
    loops = stmt.loops
    split = next((i for i, lp in enumerate(loops) if lp.kind == 1 and lp.extent > 1), None)
    if cores <= 1:
        split = None  # one cache: the parallel loop is a serial one
    spans = [access_profile(a, loops, stmt.defs) for a in stmt.accesses]
    if any(p is None for p in spans):
        return None
    spans = [p[0] for p in spans]
    extents = [lp.extent for lp in loops]
    if split is not None:
        # one core walks ceil(extent / cores) consecutive iterations; the span of that walk is
        # evaluated (a fused loop's inner index covers its whole range within one core's share)
        par = loops[split]
        per_core = math.ceil(par.extent / min(cores, par.extent))
        # only the split loop's row changes: the others get extent 1, which the profile skips
        alone = tuple(dataclasses.replace(lp, extent=per_core if j == split else 1)
                      for j, lp in enumerate(loops))
        inner = [access_profile(a, alone, stmt.defs)[0] for a in stmt.accesses]
        for b, span in enumerate(spans):
            outer = np.maximum(span[split] - inner[b][split], 0)
            spans[b] = np.concatenate([span[:split], [outer], inner[b][split:split + 1],
                                       span[split + 1:]])
        extents[split:split + 1] = [math.ceil(par.extent / per_core), per_core]
    n = len(extents)
    footprints = np.zeros((n + 1, len(spans)))
    for b, access in enumerate(stmt.accesses):
        for i in range(n + 1):
            span = spans[b][i:].sum(axis=0) if i < n else np.zeros(len(access.shape))
            footprints[i, b] = np.prod(np.minimum(1 + span, access.shape)) * access.itemsize
    return extents, footprints, split


def cache_row(func, flops: int, target: dict, caches: CacheHierarchy | None = None
              ) -> np.ndarray:
    """The cache feature row of a scheduled ``PrimFunc`` (see ``FEATURE_NAMES``) on ``target``
    (its cores, and its cache hierarchy unless ``caches`` is given)."""
    caches = caches or hierarchy_of(target)
    cores = int(target.get("num-cores") or 1)
    statements = collect_statements(func)
    main = main_statement(statements)
    if main is None:
        return np.zeros(len(FEATURE_NAMES), dtype=np.float32)
    log_flops = math.log2(max(flops, 1))
    capacities = [caches.l1, caches.l2, caches.l3]
    totals = np.zeros(len(LEVELS))
    per_buffer = np.zeros((len(LEVELS), MAIN_BUFFERS))
    for stmt in statements:
        nest = statement_nest(stmt, cores)
        if nest is None:
            continue
        for lv, capacity in enumerate(capacities):
            moved = data_movement(*nest[:2], capacity, nest[2])
            totals[lv] += moved.sum()
            if stmt is main:
                k = min(MAIN_BUFFERS, len(moved))
                per_buffer[lv, :k] = moved[:k]

    def per_flop(x):
        x = np.atleast_1d(np.asarray(x, dtype=np.float64))
        return np.where(x > 0, np.log2(np.maximum(x, 1e-30)) - log_flops, ZERO)

    cycles = totals / np.array([caches.fill_l1, caches.fill_l2, caches.fill_l3]) / cores
    # compulsory: the function's arguments, each moved once
    params = sum(math.prod(_const(d) for d in p.shape) * _itemsize(str(p.dtype))
                 for p in func.params if getattr(p, "shape", None) is not None)
    row = np.concatenate([[1.0], per_flop(totals), per_flop(per_buffer).ravel(),
                          per_flop(cycles), per_flop(cycles.max()), [np.argmax(cycles)],
                          per_flop(params)])
    return row.astype(np.float32)


class CacheFeatures(CachedExtractor):
    """Tuna's cache data-movement estimates of ``apply_config(task, config)`` per cache level;
    invalid configs give a zero row (``applied`` = 0)."""

    name = "cache"

    def __init__(self, caches: CacheHierarchy | None = None, cache_size: int = 50_000):
        super().__init__(cache_size)
        self.caches = caches  # None: each task's target says

    @property
    def dim(self) -> int:
        return len(FEATURE_NAMES)

    def _compute(self, inp: MeasureInput) -> np.ndarray:
        sch = self.scheduled(inp)
        if sch is None:
            return np.zeros(self.dim, dtype=np.float32)
        return cache_row(sch.mod["main"], inp.task.workload.flops, inp.task.target, self.caches)


__all__ = ["CacheFeatures", "CacheHierarchy", "HIERARCHIES", "FEATURE_NAMES", "cache_row",
           "data_movement", "hierarchy_of", "statement_nest"]
