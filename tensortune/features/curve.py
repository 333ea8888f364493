"""Curve features: relation curves of how the main loop nest touches each buffer, densely sampled.

After AutoTVM's ``curve`` feature with the fix of "Learning 'Learning to Optimize Tensor
Programs'": AutoTVM's implementation kept one point per relation curve, which leaves a sparse,
mostly-zero row; here every curve is sampled at ``SAMPLES`` (30) points.

For every buffer of the main statement (output first, then inputs, as in ``itervar``) the loop
nest is walked from the statement outward, one loop at a time. After each step the nest inside
has a number of iterations, touches a footprint of bytes of the buffer, reuses each element
``iterations / elements`` times, and has a touch count (the iterations of the loops that move
the buffer). Four relations of these, all in log2, are piecewise-linear curves:

    bytes_vs_iters   footprint in bytes as the nest grows (iterations on the x axis)
    reuse_vs_bytes   reuse ratio reached within a footprint (a cache size) of that many bytes
    count_vs_reuse   touch count against reuse ratio (the pair the ablation found best)
    stride_vs_iters  the access stride of each loop, against the iterations up to that loop

Each is sampled on a fixed grid of its x axis, the same for every task, so a row means the same
thing for a 64^3 matmul and a ResNet convolution and models can transfer between them. Past the
end of a curve its last value holds (np.interp clamps).
"""
from __future__ import annotations

import math

import numpy as np

from ..measure.types import MeasureInput
from .base import CachedExtractor
from .itervar import MAX_BUFFERS, access_profile, collect_statements, main_statement

SAMPLES = 30
# curve name -> (low, high) of its x axis in log2 units; generous enough for ResNet layers
CURVES = {
    "bytes_vs_iters": (0.0, 36.0),
    "reuse_vs_bytes": (0.0, 32.0),
    "count_vs_reuse": (0.0, 24.0),
    "stride_vs_iters": (0.0, 36.0),
}
GLOBAL_FEATURES = ("applied", "log_flops", "log_parallel", "log_vector", "log_auto_unroll",
                   "log_unrolled", "log_iters", "n_loops")


def curve_feature_names(samples: int = SAMPLES, max_buffers: int = MAX_BUFFERS) -> list[str]:
    """Column names: globals, then ``B{b}.{curve}.{point}`` for every buffer and curve."""
    names = list(GLOBAL_FEATURES)
    for b in range(max_buffers):
        for curve in CURVES:
            names.extend(f"B{b}.{curve}.{p}" for p in range(samples))
    return names


def curve_features(func, flops: int, samples: int = SAMPLES,
                   max_buffers: int = MAX_BUFFERS) -> np.ndarray:
    """The curve feature row of a scheduled ``PrimFunc`` (see ``curve_feature_names``)."""
    row = np.zeros(len(GLOBAL_FEATURES) + max_buffers * len(CURVES) * samples, dtype=np.float32)
    row[0] = 1.0
    row[1] = math.log2(max(flops, 1))
    main = main_statement(collect_statements(func))
    if main is None:
        return row
    loops = main.loops
    vectorized = [lp.extent for lp in loops if lp.kind == 2]
    row[2:8] = [math.log2(math.prod(lp.extent for lp in loops if lp.kind == 1)),
                math.log2(vectorized[-1]) if vectorized else 0.0,
                math.log2(1 + max((lp.auto_unroll for lp in loops), default=0)),
                math.log2(math.prod(lp.extent for lp in loops if lp.kind == 3)),
                math.log2(max(main.iterations, 1)), len(loops)]
    grids = [np.linspace(lo, hi, samples) for lo, hi in CURVES.values()]
    width = len(CURVES) * samples
    for b, access in enumerate(main.accesses[:max_buffers]):
        profile = access_profile(access, loops, main.defs)
        if profile is None:
            continue  # an index this walker cannot evaluate: the buffer's curves stay zero
        at = len(GLOBAL_FEATURES) + b * width
        for c, (xs, ys) in enumerate(_relations(access, loops, *profile)):
            row[at + c * samples: at + (c + 1) * samples] = _sample(xs, ys, grids[c])
    return row


class CurveFeatures(CachedExtractor):
    """Curve features of ``apply_config(task, config)``; invalid configs give a zero row.

    The width is the same for every task: ``len(curve_feature_names(samples, max_buffers))``.
    """

    name = "curve"

    def __init__(self, samples: int = SAMPLES, max_buffers: int = MAX_BUFFERS,
                 cache_size: int = 50_000):
        if samples < 2:
            raise ValueError(f"a curve needs at least 2 sample points, got {samples}")
        super().__init__(cache_size)
        self.samples = samples
        self.max_buffers = max_buffers

    @property
    def dim(self) -> int:
        return len(curve_feature_names(self.samples, self.max_buffers))

    def _compute(self, inp: MeasureInput) -> np.ndarray:
        sch = self.scheduled(inp)
        if sch is None:
            return np.zeros(self.dim, dtype=np.float32)  # "applied" = 0 marks it
        return curve_features(sch.mod["main"], inp.task.workload.flops, self.samples,
                              self.max_buffers)


def _relations(access, loops, spans, strides) -> list[tuple[list[float], list[float]]]:
    """The (x, y) points of each curve in ``CURVES`` order, innermost point first."""
    n = len(loops)
    iters, bytes_, reuse, count = [0.0], [math.log2(access.itemsize)], [0.0], [0.0]
    stride_x, stride_y = [], []
    inner_iters = moved = 1.0
    for i in range(n - 1, -1, -1):  # loop i joins the nest inside it
        extent = loops[i].extent
        inner_iters *= extent
        if spans[i].any():
            moved *= extent
        elements = float(np.prod(np.minimum(1 + spans[i:].sum(axis=0), access.shape)))
        iters.append(math.log2(inner_iters))
        bytes_.append(math.log2(elements * access.itemsize))
        reuse.append(math.log2(max(inner_iters / elements, 1.0)))
        count.append(math.log2(moved))
        if extent > 1:  # a unit loop has no stride to speak of
            stride_x.append(math.log2(inner_iters))
            stride_y.append(math.log2(1 + abs(strides[i])))
    return [(iters, bytes_), (bytes_, reuse), (reuse, count), (stride_x, stride_y)]


def _sample(xs: list[float], ys: list[float], grid: np.ndarray) -> np.ndarray:
    """The piecewise-linear curve through the points, at ``grid``.

    x must not decrease along a curve, so it is made monotone (the span-based footprint can
    shrink the reuse ratio of an overlapping window by a little); where several points share
    an x the outermost one wins, since the whole nest up to it fits in the same x.
    """
    if not xs:
        return np.zeros_like(grid)
    px, py = [], []
    top = -math.inf
    for x, y in zip(xs, ys):
        top = max(top, x)
        if px and top <= px[-1]:
            py[-1] = y
        else:
            px.append(top)
            py.append(y)
    return np.interp(grid, px, py)
