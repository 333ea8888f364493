"""Expand-then-depthwise fusion: a 1x1 convolution and the 3x3 (or 5x5) depthwise convolution
it feeds as one function, so the expanded activations never leave the cache.

An inverted residual block (MobileNet V2, EfficientNet, MnasNet) widens its input by a 1x1
convolution (16 to 96 channels on MobileNet V2's 112x112 layer: a 4.8 MB tensor), applies a
bias and a clipped activation, and filters the result with a 3x3 (EfficientNet: also 5x5)
depthwise convolution. Run
as two kernels, the wide tensor goes out to memory and comes back: on a 2-core Zen 4 the pair
took 425 us in the model against 293 us timed alone, the rest being that round trip. Fused,
the depthwise convolution's row block computes the rows of the expanded tensor it needs (a
halo of one or two rows is computed twice) into a buffer that stays in L1/L2
(``space.cpu_expand_depthwise`` schedules it); the pair runs in about 220 us.

The rewrite takes ``conv2d_1x1(x, W1) [+ b1] [max lo | relu] [min hi]`` followed by a depthwise
``conv2d(., W2, groups=C)`` whose weights are constants and whose intermediate values have no
other use, on NHWC/HWIO, and only where the expanded tensor is at least ``min_bytes`` (smaller
ones stay in L2 anyway). The depthwise bias and activation after it are fused by ``FuseOps``.
"""
from __future__ import annotations

import numpy as np

from ..errors import strict
from .rewriting import mutate_functions, single_use_call, use_counts

# block names the template looks for (``space.cpu_expand_depthwise``)
POINTWISE, POINTWISE_ACT, PAD, DEPTHWISE = "tt_pointwise", "tt_pointwise_act", "tt_pad", "tt_depthwise"
DEFAULT_MIN_BYTES = 1 << 20
REWRITE = "expand-depthwise fusion"


def expand_depthwise(x, w1, b1, w2, stride: int, padding, lo, hi):
    """TE: ``depthwise(clip(x @ W1 + b1, lo, hi), W2)`` in NHWC, ``W2`` of shape
    ``[kh, kw, 1, C]`` (``lo``/``hi`` None: no bound)."""
    from tvm import te, topi

    stride, padding = int(stride), [int(p) for p in padding]
    n, h, w, cin = (int(d) for d in x.shape)
    c = int(w1.shape[-1])
    k = te.reduce_axis((0, cin), name="rc")
    pw = te.compute((n, h, w, c), lambda b, y, xx, co: te.sum(x[b, y, xx, k] * w1[0, 0, k, co],
                                                              axis=k), name=POINTWISE)

    def act(b, y, xx, co):
        v = pw[b, y, xx, co] + b1[co]
        if lo is not None:
            v = te.max(v, te.const(float(lo), x.dtype))
        if hi is not None:
            v = te.min(v, te.const(float(hi), x.dtype))
        return v

    expanded = te.compute((n, h, w, c), act, name=POINTWISE_ACT)
    top, left, bottom, right = padding
    padded = topi.nn.pad(expanded, [0, top, left, 0], [0, bottom, right, 0], name=PAD)
    kh, kw = int(w2.shape[0]), int(w2.shape[1])
    oh = (h + top + bottom - kh) // stride + 1
    ow = (w + left + right - kw) // stride + 1
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    return te.compute(
        (n, oh, ow, c),
        lambda b, y, xx, co: te.sum(padded[b, y * stride + ry, xx * stride + rx, co]
                                    * w2[ry, rx, 0, co], axis=[ry, rx]),
        name=DEPTHWISE)


def _const_array(expr):
    from tvm.ir import GenericConst

    return expr.value.numpy() if isinstance(expr, GenericConst) else None


def _scalar(expr):
    value = _const_array(expr)
    return float(value) if value is not None and value.size == 1 else None


def _depthwise_weight(call):
    """The [kh, kw, 1, C] weight (3x3 or 5x5) of an NHWC/HWIO depthwise, undilated
    convolution, or None."""
    attrs = call.attrs
    if (attrs.data_layout != "NHWC" or attrs.kernel_layout != "HWIO" or attrs.out_layout != "NHWC"
            or any(int(d) != 1 for d in attrs.dilation)):
        return None
    w = _const_array(call.args[1])
    strides = {int(s) for s in attrs.strides}
    if (w is None or w.ndim != 4 or w.shape[:2] not in ((3, 3), (5, 5)) or w.shape[2] != 1
            or len(strides) != 1):
        return None
    if int(attrs.groups) != w.shape[3] or int(call.args[0].ty.shape[3]) != w.shape[3]:
        return None
    return w


def _pointwise_weight(call):
    """The [1, 1, Cin, C] weight of a plain 1x1 NHWC/HWIO convolution, or None."""
    attrs = call.attrs
    if (attrs.data_layout != "NHWC" or attrs.kernel_layout != "HWIO" or attrs.out_layout != "NHWC"
            or int(attrs.groups) != 1 or any(int(s) != 1 for s in attrs.strides)
            or any(int(p) != 0 for p in attrs.padding)):
        return None
    w = _const_array(call.args[1])
    return w if w is not None and w.shape[:2] == (1, 1) else None


def expand_depthwise_pass(min_bytes: int = DEFAULT_MIN_BYTES):
    """A module pass fusing each eligible expand-then-depthwise pair (module docstring)."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        def __init__(self, mod, uses, failed: list):
            super().__init__(mod)
            self.uses = uses
            self.failed = failed  # (call, error) of the pairs left apart

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", "") != "relax.nn.conv2d":
                return call
            w2 = _depthwise_weight(call)
            chain = self._chain(call.args[0]) if w2 is not None else None
            if chain is None:
                return call
            x, w1, b1, lo, hi = chain
            n, h, w, c = (int(d) for d in call.args[0].ty.shape)
            if n * h * w * c * 4 < min_bytes or w1.shape[3] != c:
                return call
            stride = int(call.attrs.strides[0])
            padding = [int(p) for p in call.attrs.padding]
            try:
                return self.builder_.call_te(
                    expand_depthwise, x, relax.const(w1), relax.const(b1), relax.const(w2),
                    stride, padding, lo, hi, primfunc_name_hint="expand_depthwise")
            except Exception as err:  # that pair stays two convolutions; the others go on
                if strict():  # TENSORTUNE_STRICT: raise what would be swallowed
                    raise
                self.failed.append((call, err))
                return call

        def _chain(self, var):
            """``(x, W1, b1, lo, hi)`` when ``var`` is ``[min]([max|relu]([add](conv1x1(x))))``
            with each step's value used only by the next, else None."""
            lo = hi = None
            b1 = None
            step = self._single_use_binding(var)
            if step is not None and getattr(step.op, "name", "") == "relax.minimum":
                hi = _scalar(step.args[1])
                step = None if hi is None else self._single_use_binding(step.args[0])
            if step is not None and getattr(step.op, "name", "") == "relax.maximum":
                lo = _scalar(step.args[1])
                step = None if lo is None else self._single_use_binding(step.args[0])
            elif step is not None and getattr(step.op, "name", "") == "relax.nn.relu":
                lo = 0.0
                step = self._single_use_binding(step.args[0])
            if step is not None and getattr(step.op, "name", "") == "relax.add":
                bias = _const_array(step.args[1])
                if bias is None or bias.size != int(step.ty.shape[3]):
                    return None
                b1 = bias.reshape(-1)
                step = self._single_use_binding(step.args[0])
            if step is None or getattr(step.op, "name", "") != "relax.nn.conv2d":
                return None
            w1 = _pointwise_weight(step)
            if w1 is None:
                return None
            if b1 is None:
                b1 = np.zeros(w1.shape[3], w1.dtype)
            return step.args[0], w1, b1.astype(w1.dtype), lo, hi

        def _single_use_binding(self, var):
            return single_use_call(self, self.uses, var)

    @tvm.transform.module_pass(opt_level=0, name="TensortuneExpandDepthwise")
    def apply(mod, _ctx):
        failed: list = []
        out = mutate_functions(Rewriter(mod, use_counts(mod), failed), mod)
        if failed:
            from .winograd import describe_conv, warn_skipped

            warn_skipped(REWRITE, [describe_conv(c) for c, _ in failed], failed[0][1])
        return relax.transform.DeadCodeElimination()(out)

    return apply
