"""The operators tensortune tunes: matmul, dense, batch_matmul, conv2d (NCHW, groups)."""
from __future__ import annotations

import dataclasses

import numpy as np

from .base import Workload, WorkloadError, positive
from .primfunc import PrimFuncWorkload


@dataclasses.dataclass(frozen=True, kw_only=True)
class Matmul(Workload):
    """C[M, N] = A[M, K] @ B[K, N]."""

    op = "matmul"
    m: int = 1
    n: int = 1
    k: int = 1

    def __post_init__(self):
        for name in ("m", "n", "k"):
            positive(name, getattr(self, name))

    def build_te(self):
        from tvm import te

        a = te.placeholder((self.m, self.k), self.dtype, name="A")
        b = te.placeholder((self.k, self.n), self.dtype, name="B")
        r = te.reduce_axis((0, self.k), name="k")
        c = te.compute((self.m, self.n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
        return [a, b, c]

    @property
    def flops(self):
        return 2 * self.m * self.n * self.k

    def reference(self, a, b):
        return a @ b


@dataclasses.dataclass(frozen=True, kw_only=True)
class Dense(Workload):
    """Y[batch, out] = X[batch, in] @ W[out, in]^T (+ bias[out]), like ``torch.nn.Linear``."""

    op = "dense"
    batch: int = 1
    in_features: int = 1
    out_features: int = 1
    bias: bool = False

    def __post_init__(self):
        for name in ("batch", "in_features", "out_features"):
            positive(name, getattr(self, name))

    def build_te(self):
        from tvm import te

        x = te.placeholder((self.batch, self.in_features), self.dtype, name="X")
        w = te.placeholder((self.out_features, self.in_features), self.dtype, name="W")
        r = te.reduce_axis((0, self.in_features), name="k")
        y = te.compute((self.batch, self.out_features),
                       lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), name="dense")
        if not self.bias:
            return [x, w, y]
        b = te.placeholder((self.out_features,), self.dtype, name="bias")
        out = te.compute(y.shape, lambda i, j: y[i, j] + b[j], name="bias_add")
        return [x, w, b, out]

    @property
    def flops(self):
        return 2 * self.batch * self.in_features * self.out_features

    def reference(self, x, w, b=None):
        y = x @ w.T
        return y + b if b is not None else y


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchMatmul(Workload):
    """C[b, M, N] = A[b, M, K] @ B[b, K, N]."""

    op = "batch_matmul"
    b: int = 1
    m: int = 1
    n: int = 1
    k: int = 1

    def __post_init__(self):
        for name in ("b", "m", "n", "k"):
            positive(name, getattr(self, name))

    def build_te(self):
        from tvm import te

        a = te.placeholder((self.b, self.m, self.k), self.dtype, name="A")
        bb = te.placeholder((self.b, self.k, self.n), self.dtype, name="B")
        r = te.reduce_axis((0, self.k), name="k")
        c = te.compute((self.b, self.m, self.n),
                       lambda q, i, j: te.sum(a[q, i, r] * bb[q, r, j], axis=r), name="C")
        return [a, bb, c]

    @property
    def flops(self):
        return 2 * self.b * self.m * self.n * self.k

    def reference(self, a, b):
        return a @ b


@dataclasses.dataclass(frozen=True, kw_only=True)
class Conv2d(Workload):
    """NCHW / OIHW 2-D convolution with stride, padding, dilation and groups."""

    op = "conv2d"
    n: int = 1
    c: int = 1
    h: int = 1
    w: int = 1
    filters: int = 1
    kh: int = 1
    kw: int = 1
    stride: int = 1
    padding: int = 0
    dilation: int = 1
    groups: int = 1

    def __post_init__(self):
        for name in ("n", "c", "h", "w", "filters", "kh", "kw", "stride", "dilation", "groups"):
            positive(name, getattr(self, name))
        if not isinstance(self.padding, int) or self.padding < 0:
            raise WorkloadError(f"padding must be a non-negative integer, got {self.padding!r}")
        if self.c % self.groups or self.filters % self.groups:
            raise WorkloadError(f"groups={self.groups} must divide both input channels ({self.c}) "
                                f"and filters ({self.filters})")
        if self.out_h <= 0 or self.out_w <= 0:
            raise WorkloadError(
                f"conv2d output would be empty: input {self.h}x{self.w}, kernel {self.kh}x{self.kw}, "
                f"padding {self.padding}, dilation {self.dilation}")

    @property
    def out_h(self):
        return (self.h + 2 * self.padding - self.dilation * (self.kh - 1) - 1) // self.stride + 1

    @property
    def out_w(self):
        return (self.w + 2 * self.padding - self.dilation * (self.kw - 1) - 1) // self.stride + 1

    def build_te(self):
        from tvm import te, tirx

        data = te.placeholder((self.n, self.c, self.h, self.w), self.dtype, name="data")
        weight = te.placeholder((self.filters, self.c // self.groups, self.kh, self.kw),
                                self.dtype, name="weight")
        p = self.padding
        if p:
            hp, wp = self.h + 2 * p, self.w + 2 * p
            padded = te.compute(
                (self.n, self.c, hp, wp),
                lambda b, c, y, x: tirx.if_then_else(
                    tirx.all(y >= p, y < self.h + p, x >= p, x < self.w + p),
                    data[b, c, y - p, x - p], tirx.const(0.0, self.dtype)),
                name="pad")
        else:
            padded = data
        cg, fg = self.c // self.groups, self.filters // self.groups
        rc = te.reduce_axis((0, cg), name="rc")
        ry = te.reduce_axis((0, self.kh), name="ry")
        rx = te.reduce_axis((0, self.kw), name="rx")
        s, d = self.stride, self.dilation
        out = te.compute(
            (self.n, self.filters, self.out_h, self.out_w),
            lambda b, f, y, x: te.sum(
                padded[b, f // fg * cg + rc, y * s + ry * d, x * s + rx * d] * weight[f, rc, ry, rx],
                axis=[rc, ry, rx]),
            name="conv2d")
        return [data, weight, out]

    @property
    def flops(self):
        return 2 * self.n * self.filters * self.out_h * self.out_w * (self.c // self.groups) * self.kh * self.kw

    def reference(self, data, weight):
        p, s, d = self.padding, self.stride, self.dilation
        x = np.pad(data, ((0, 0), (0, 0), (p, p), (p, p)))
        span_h, span_w = d * (self.kh - 1) + 1, d * (self.kw - 1) + 1
        win = np.lib.stride_tricks.sliding_window_view(x, (span_h, span_w), axis=(2, 3))
        win = win[:, :, ::s, ::s, ::d, ::d][:, :, : self.out_h, : self.out_w]
        cg, fg = self.c // self.groups, self.filters // self.groups
        outs = []
        for g in range(self.groups):
            wg = win[:, g * cg:(g + 1) * cg]  # n, cg, oh, ow, kh, kw
            kg = weight[g * fg:(g + 1) * fg]  # fg, cg, kh, kw
            outs.append(np.einsum("ncyxhw,fchw->nfyx", wg, kg, optimize=True))
        return np.concatenate(outs, axis=1).astype(self.dtype)


OPS: dict[str, type[Workload]] = {
    cls.op: cls for cls in (Matmul, Dense, BatchMatmul, Conv2d, PrimFuncWorkload)}


def workload_from_dict(d: dict) -> Workload:
    """Inverse of ``Workload.to_dict``; unknown operators and fields are refused by name."""
    d = dict(d)
    op = d.pop("op", None)
    if op not in OPS:
        raise WorkloadError(f"unknown operator {op!r}; known: {', '.join(sorted(OPS))}")
    cls = OPS[op]
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - fields
    if unknown:
        raise WorkloadError(f"{op}: unknown parameter(s) {', '.join(sorted(unknown))}")
    return cls(**d)
