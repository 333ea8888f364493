"""Grouped convolutions with few channels per group, vectorized along the image row.

A grouped convolution (ResNeXt's 32 groups of 4 or 8 channels, RegNet's groups of 8) in NHWC
reads ``x[n, y + ry, x + rx, (co // fg) * gw + rc]``: along the output channels, the input
index jumps every ``fg`` channels, so a vector of output channels wider than one group reads
the input through a gather that LLVM scalarizes, and a vector one group wide is 4 or 8 lanes.
Such layers ran at 7-19% of the FMA peak (ResNeXt-50's 56x56 stage: 4.5 ms for 3 calls on the
Xeon of 2026-11-27), and merging groups into wider ones with zero weights ran slower still.

The rewrite copies the (padded) input once into ``xt[n, row, group, rc, phase, col]``, each
group's channels as planes of image columns (split into ``stride`` phases, so a strided
convolution reads columns contiguously too), and computes the convolution from it
(``tt_group_conv``) with the image columns as the vector axis: each lane is an output pixel,
the input is a contiguous load and the weight a broadcast, as in a direct NCHW convolution.
The output stays NHWC, so the bias and activation after it fuse as before. The block carries
``VECTOR_AXIS`` (its column axis), which the CPU template's seeds take as their vector axis.

Where a group's outputs fill a whole vector of the target (AVX2's 8 lanes: RegNet's groups of
8), the channel axis carries the vector without a gather (``space.seeds`` keeps the register
tile inside one group) and the convolution stays in TOPI's form. On Zen 3, tuned against
tuned, RegNet-Y's strided ones took 0.52-0.83 of the packed form's time (whose copy is a
quarter of it), its others 0.82-1.21: its grouped layers 23% less in all.
"""
from __future__ import annotations

from ..errors import strict
from ..space.analysis import VECTOR_AXIS
from .winograd import rewrite_functions

REWRITE = "grouped convolution"
CONV, PACK, CROP = "tt_group_conv", "tt_group_pack", "tt_group_crop"
VECTOR = 16  # float32 lanes of an AVX-512 vector: the default target's
# columns computed per row: a whole vector at least. RegNet's 14x14 rows are computed 16 wide
# (its 208-channel grouped 3x3: 70 us in TOPI's form, 37 us + 10 us for the copy rewritten);
# 7x7 rows stay in TOPI's form (16 columns would more than double the work)
MIN_WIDTH = 16


def eligible(call, lanes: int = VECTOR) -> bool:
    """An NHWC/HWIO grouped (not depthwise) convolution of a constant weight, undilated, with
    fewer outputs per group than ``lanes`` (the target's float32 vector; from a whole vector on
    the channel axis carries it) and rows computed ``MIN_WIDTH`` or more columns wide
    (``padded_width``)."""
    from tvm.ir import GenericConst

    attrs = call.attrs
    if (attrs.data_layout != "NHWC" or attrs.kernel_layout != "HWIO" or attrs.out_layout != "NHWC"
            or not isinstance(call.args[1], GenericConst)):
        return False
    groups = int(attrs.groups)
    _, _, gw, cout = (int(d) for d in call.args[1].value.shape)
    if groups == 1 or gw == 1 or cout % groups:
        return False
    if any(int(d) != 1 for d in attrs.dilation) or len(set(int(s) for s in attrs.strides)) != 1:
        return False
    out_w = int(call.ty.shape[2])
    return cout // groups < lanes and padded_width(out_w) >= MIN_WIDTH


def padded_width(out_w: int) -> int:
    """Columns the convolution computes: a multiple of ``VECTOR`` where that costs at most a
    quarter more (56 -> 64: 16-lane vectors instead of 8-lane ones; 37 stays 37)."""
    extra = -out_w % VECTOR
    return out_w + extra if extra * 4 <= out_w else out_w


def group_pack(data, groups: int, stride: int, padding, cols: int):
    """``xt[n, row, g, rc, phase, col] = x_padded[n, row, col * stride + phase, g * gw + rc]``
    (zero outside the image), ``cols`` columns per phase."""
    from tvm import te, tirx

    groups, stride, cols = int(groups), int(stride), int(cols)
    padding = [int(p) for p in padding]
    n, h, w, c = (int(d) for d in data.shape)
    gw = c // groups
    top, left, bottom, _ = padding

    def value(b, row, g, rc, phase, col):
        iy, ix = row - top, col * stride + phase - left
        inside = tirx.all(iy >= 0, iy < h, ix >= 0, ix < w)
        return tirx.if_then_else(inside, data[b, iy, ix, g * gw + rc], tirx.const(0, data.dtype))

    return te.compute((n, h + top + bottom, groups, gw, stride, cols), value, name=PACK)


def group_conv(packed, weight, stride: int, out_h: int, out_w: int, width: int):
    """``y[n, oy, ox, co] = sum xt[n, oy * s + ry, co // fg, rc, rx % s, ox + rx // s] *
    w[ry, rx, rc, co]`` over ``width`` columns (then cropped to ``out_w``), the column axis
    marked as the vector axis."""
    from tvm import te

    stride, out_h, out_w, width = int(stride), int(out_h), int(out_w), int(width)
    n, groups = int(packed.shape[0]), int(packed.shape[2])
    kh, kw, gw, cout = (int(d) for d in weight.shape)
    fg = cout // groups
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rc = te.reduce_axis((0, gw), name="rc")
    conv = te.compute(
        (n, out_h, width, cout),
        lambda b, oy, ox, co: te.sum(
            packed[b, oy * stride + ry, co // fg, rc, rx % stride, ox + rx // stride]
            * weight[ry, rx, rc, co], axis=[ry, rx, rc]),
        name=CONV, attrs={VECTOR_AXIS: "ox"})
    if width == out_w:
        return conv
    return te.compute((n, out_h, out_w, cout), lambda b, oy, ox, co: conv[b, oy, ox, co],
                      name=CROP)


def grouped_conv_pass(lanes: int = VECTOR):
    """A module pass rewriting every grouped convolution ``eligible`` for ``lanes``-wide
    vectors as a packed copy of its input and a column-vectorized convolution."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        def __init__(self, mod, failed: list):
            super().__init__(mod)
            self.failed = failed

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", "") != "relax.nn.conv2d" or not eligible(call, lanes):
                return call
            try:
                data, weight = call.args
                if not isinstance(data, relax.Var):  # a nested call (an input's layout change)
                    data = self.builder_.emit(data)
                _, out_h, out_w, _ = (int(d) for d in call.ty.shape)
                stride = int(call.attrs.strides[0])
                padding = [int(p) for p in call.attrs.padding]
                width = padded_width(out_w)
                kw = int(weight.ty.shape[1])
                cols = max(-(-(int(data.ty.shape[2]) + padding[1] + padding[3]) // stride),
                           width + (kw - 1) // stride)
                packed = self.builder_.emit_te(group_pack, data, int(call.attrs.groups), stride,
                                               padding, cols, primfunc_name_hint="group_pack")
                return self.builder_.call_te(group_conv, packed, weight, stride, out_h, out_w,
                                             width, primfunc_name_hint="group_conv")
            except Exception as err:  # that convolution stays as it was; the others go on
                if strict():  # TENSORTUNE_STRICT: raise what would be swallowed
                    raise
                self.failed.append((call, err))
                return call

    @tvm.transform.module_pass(opt_level=0, name="TensortuneGroupedConv")
    def apply(mod, _ctx):
        failed: list = []
        return rewrite_functions(mod, Rewriter(mod, failed), failed, REWRITE)

    return apply
