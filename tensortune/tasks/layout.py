"""Whole-model layout: activations stay channels-last (NHWC) from the first convolution to the
last, weights are constants in the layout their kernel reads.

TVM's ``ConvertLayout`` moves every convolution and pooling to NHWC and carries the layout
through elementwise operators, so a transpose is left only where the model's input and output
(or an operator without layout support) need NCHW. Convolution weights become HWIO (output
channels innermost, the axis the kernels vectorize); ``FoldConstant`` transposes them once, at
compile time. A template may still pack a weight into a panel layout of its own tile size
(``cpu_template``'s ``pack_<weight>`` at ``root``): because the weight is a constant, that copy
is split off and folded as well (``prepack``), so no call ever re-packs a weight.

Why NHWC and not a blocked NCHW[x]c: channels-last gives the micro-kernel the same contiguous
vectors (output channels in the accumulators, input channels streamed), needs no channel count
divisible by a block (3-channel stems, 24, 72 or 200 channels), and TVM legalizes it as it is.
"""
from __future__ import annotations

LAYOUTS = ("nhwc", "nchw")
DEFAULT_LAYOUT = "nhwc"

# pooling and elementwise operators follow their input's layout (TVM refuses a desired layout
# for pooling), so naming the convolutions is enough
_DESIRED = {"relax.nn.conv2d": ["NHWC", "HWIO"]}


def check_layout(layout: str) -> str:
    """``layout`` lower-cased if it is one of ``LAYOUTS``; ``ValueError`` naming them otherwise."""
    name = str(layout).lower()
    if name not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    return name


def convert_layout(mod, layout: str = DEFAULT_LAYOUT):
    """``mod`` with its convolutions and pooling in ``layout`` (``nchw``: unchanged)."""
    import tvm
    from tvm import relax

    if check_layout(layout) == "nchw":
        return mod
    return tvm.transform.Sequential([
        clip_as_min_max(),
        relax.transform.ConvertLayout(_DESIRED),
        relax.transform.CanonicalizeBindings(),
        fold_constant_transposes(),
        relax.transform.FoldConstant(),  # anything else on constants (nothing, in the zoo)
    ])(mod)


def fold_constant_transposes():
    """Transpose the weights ``ConvertLayout`` wrapped in ``permute_dims`` in numpy.

    ``FoldConstant`` compiles and runs a kernel for each one: 4.1 of the 4.7 s MobileNet V2's
    whole preparation took on a Zen 4 core, for 104 transposes numpy does in milliseconds.
    """
    import numpy as np
    from tvm import relax
    from tvm.ir import GenericConst

    # an ExprMutator, not ``rewrite_call``: that one also merged two equal transposes of an
    # activation in ShuffleNet V2, which changed its fused functions (and so its tasks' keys)
    @relax.expr_functor.mutator
    class Fold(relax.PyExprMutator):
        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            if getattr(call.op, "name", "") != "relax.permute_dims" \
                    or not isinstance(call.args[0], GenericConst):
                return call
            axes = call.attrs.axes
            value = np.transpose(call.args[0].value.numpy(),
                                 None if axes is None else [int(a) for a in axes])
            return relax.const(np.ascontiguousarray(value))

    @relax.transform.function_pass(opt_level=0, name="TensortuneFoldConstantTransposes")
    def apply(func, mod, _ctx):
        return Fold(mod).visit_expr(func)

    return apply


def clip_as_min_max():
    """Rewrite ``clip(x, lo, hi)`` (ReLU6) as ``minimum(maximum(x, lo), hi)``.

    ``clip`` has no layout rule in TVM 0.27, so ``ConvertLayout`` would wrap every ReLU6 of a
    MobileNet in a transpose pair; ``maximum`` and ``minimum`` follow their input's layout and
    fuse into the convolution before them just the same.
    """
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    pattern = is_op("relax.clip")(wildcard(), wildcard(), wildcard())

    def rewrite(expr, _matches):
        x, lo, hi = expr.args
        dtype = str(x.ty.dtype)
        bounds = [_scalar(v) for v in (lo, hi)]
        if None in bounds or not dtype.startswith("float"):
            return expr
        low = relax.op.maximum(x, relax.const(bounds[0], dtype))
        return relax.op.minimum(low, relax.const(bounds[1], dtype))

    @relax.transform.function_pass(opt_level=0, name="TensortuneClipAsMinMax")
    def apply(func, _mod, _ctx):
        return rewrite_call(pattern, rewrite, func)

    return apply


def _scalar(value):
    """The Python number of a constant bound (a ``FloatImm``/``IntImm``, or a ``PrimValue``
    holding one), else None."""
    for _ in range(2):
        value = getattr(value, "value", None)
        if isinstance(value, (int, float)):
            return float(value)
    return None
