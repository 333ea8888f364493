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

Some of TVM 0.27's per-operator layout rules fail (``stack``, ``dropout``, a one-piece
``split``; see ``_broken_rule``), and an unknown one may: such an operator is hidden from
``ConvertLayout`` (it then sees NCHW inputs, as in the model) instead of failing the model, and
a ``GraphRewriteWarning`` names it. Old ONNX graphs rarely reach this: ``frontend.onnx_fold``
and ``onnx_import`` already turn their ``Dropout``, ``Split`` and ``Sum`` into plain operators.

``ConvertLayout`` also moves a transposed convolution to NHWC, which TVM 0.27 cannot legalize
(only NCHW/IOHW): ``transposed_convolutions`` turns one of a constant kernel into an ordinary
NHWC convolution and a depth-to-space copy (``tasks.transposed``), and runs any other kind in
NCHW between transposes.

3-D convolutions (video, volumes) go channels-last too, NDHWC with DHWIO weights: left in
NCDHW, a video network's convolutions ran at 9-31% of the FMA peak with the row-wise W axis
innermost, 3.3x slower than ONNX Runtime (R(2+1)D-style, Zen 4, 2026-11-28); in NDHWC the same
hardware-free build ran at 45-91% and beat it. A transposed 3-D convolution (TOPI: NCDHW only)
runs in NCDHW between transposes.
"""
from __future__ import annotations

import warnings

import numpy as np

from .rewriting import mutate_functions
from .transposed import subpixel, transposed3d

LAYOUTS = ("nhwc", "nchw")
DEFAULT_LAYOUT = "nhwc"
REWRITE = "NHWC layout conversion"

# pooling and elementwise operators follow their input's layout (TVM refuses a desired layout
# for pooling), so naming the convolutions is enough
_DESIRED = {"relax.nn.conv2d": ["NHWC", "HWIO"], "relax.nn.conv3d": ["NDHWC", "DHWIO"]}
MAX_SKIPPED = 8  # operators searched for one by one before the model stays NCHW
_HIDDEN = "tensortune.layout_hidden."


class GraphRewriteWarning(UserWarning):
    """A whole-model rewrite left part of a model (or all of it) as it was."""


def check_layout(layout: str) -> str:
    """``layout`` lower-cased if it is one of ``LAYOUTS``; ``ValueError`` naming them otherwise."""
    name = str(layout).lower()
    if name not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    return name


def convert_layout(mod, layout: str = DEFAULT_LAYOUT):
    """``mod`` with its convolutions and pooling in ``layout`` (``nchw``: unchanged).

    An operator whose layout rule fails (TVM raises inside ``ConvertLayout``) is left out of
    the conversion: it gets its inputs back in NCHW, and one ``GraphRewriteWarning`` names it.
    If that is not enough the error propagates (``GraphOptions.rewrite`` then keeps NCHW)."""
    import tvm
    from tvm import relax

    if check_layout(layout) == "nchw":
        return mod
    mod = clip_as_min_max()(mod)
    calls = _op_calls(mod)
    skipped = {i for i, call in enumerate(calls) if _broken_rule(call)}
    converted, error = _convert(mod, skipped)
    searched = 0
    while converted is None and searched < MAX_SKIPPED:
        culprit = _find_culprit(mod, skipped, len(calls))
        if culprit is None:
            break
        skipped.add(culprit)
        searched += 1
        converted, error = _convert(mod, skipped)
    if converted is None:
        raise error
    if skipped:
        counts: dict = {}
        for i in sorted(skipped):
            counts[calls[i].op.name] = counts.get(calls[i].op.name, 0) + 1
        ops = ", ".join(f"{name} (x{n})" for name, n in counts.items())
        warnings.warn(f"{REWRITE} left {len(skipped)} operator(s) in NCHW, their inputs "
                      f"transposed back: {ops}", GraphRewriteWarning, stacklevel=2)
    return tvm.transform.Sequential([
        transposed_convolutions(),
        relax.transform.CanonicalizeBindings(),
        fold_constant_transposes(),
        relax.transform.FoldConstant(),  # anything else on constants (nothing, in the zoo)
    ])(converted)


def _broken_rule(call) -> bool:
    """Operators whose TVM 0.27 layout rule fails whatever layout its input has: ``stack``
    names its new axis "S", which no later operator (nor the transpose back) can read;
    ``dropout`` gives its (output, mask) tuple one tensor's layout; a ``split`` into one piece
    returns a tensor where its rule expects a tuple."""
    from tvm import relax

    name = call.op.name
    if name in ("relax.stack", "relax.nn.dropout"):
        return True
    return name == "relax.split" and not isinstance(call.ty, relax.TupleType)


def _convert(mod, skipped: set):
    """``(ConvertLayout of mod with the calls numbered in skipped hidden, None)``, or
    ``(None, the error)``."""
    from tvm import relax

    try:
        if not skipped:
            return relax.transform.ConvertLayout(_DESIRED)(mod), None
        hidden, originals = _hide(mod, skipped)
        out = _restore(relax.transform.ConvertLayout(_DESIRED)(hidden), originals)
        relax.analysis.well_formed(out)  # raises on the first violation (0.2 s, MobileNet V2)
        return out, None
    except Exception as err:  # TVM's InternalError, IndexError, ...: judged by the caller
        return None, err


def _find_culprit(mod, skipped: set, n: int):
    """The call whose layout rule fails: the last ``i`` for which hiding every call from ``i``
    on converts (the pass goes forward, so the first failing binding decides); None when
    hiding everything still fails."""
    if _convert(mod, skipped | set(range(n)))[0] is None:
        return None
    good, bad = 0, n  # hiding calls >= good converts, hiding calls >= bad does not
    while bad - good > 1:
        mid = (good + bad) // 2
        if _convert(mod, skipped | set(range(mid, n)))[0] is not None:
            good = mid
        else:
            bad = mid
    return good if good not in skipped else None


def _op_calls(mod) -> list:
    """The operator calls of ``mod``'s Relax functions, in the order ``_hide`` numbers them."""
    calls = []
    _hide(mod, set(), calls.append)
    return calls


def _hide(mod, numbers: set, seen=None):
    """``mod`` with the operator calls numbered in ``numbers`` replaced by opaque
    ``call_pure_packed`` placeholders, which ``ConvertLayout`` treats as operators without a
    layout rule (inputs and output in the initial layout); returns it and the originals."""
    import tvm
    from tvm import relax

    originals: list = []
    count = [0]

    @relax.expr_functor.mutator
    class Hide(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not isinstance(call.op, tvm.ir.Op):
                return call
            number, count[0] = count[0], count[0] + 1
            if seen is not None:
                seen(call)
            if number not in numbers:
                return call
            originals.append(call)
            return relax.op.call_pure_packed(f"{_HIDDEN}{len(originals) - 1}", *call.args,
                                             ty_args=call.ty)

    return mutate_functions(Hide(mod), mod), originals


def _restore(mod, originals: list):
    """Put the calls ``_hide`` replaced back, on their (possibly transposed) arguments."""
    import tvm
    from tvm import relax

    if not originals:
        return mod
    packed = tvm.ir.Op.get("relax.call_pure_packed")

    @relax.expr_functor.mutator
    class Restore(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            callee = call.args[0] if call.op.same_as(packed) else None
            name = str(getattr(callee, "global_symbol", ""))
            if not isinstance(callee, relax.ExternFunc) or not name.startswith(_HIDDEN):
                return call
            original = originals[int(name[len(_HIDDEN):])]
            return relax.Call(original.op, list(call.args[1:]), original.attrs,
                              original.ty_args)

    return mutate_functions(Restore(mod), mod)


def transposed_convolutions():
    """Rewrite the transposed convolutions ``ConvertLayout`` moved to NHWC into what TVM 0.27
    can legalize (its ``conv2d_transpose`` rule takes NCHW data with an IOHW kernel only; any
    other layout reaches the VM unlowered and fails the build).

    One of a constant kernel (groups 1, no dilation) is an ordinary stride-1 NHWC convolution
    to ``s^2 * Cout`` channels and a depth-to-space reshuffle (``tasks.transposed``: the
    sub-pixel decomposition; U-Net's kernel = stride is a 1x1 one), so it gets the conv2d
    template and no multiplication by an inserted zero is done (TOPI's NCHW kernel dilates
    its input: ``stride^2`` times the work). A kernel computed at run time equal to its stride
    becomes the 1x1 form by reshapes; any other one runs in NCHW between two transposes, as
    the model had it."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = getattr(call.op, "name", "")
            if name == "relax.nn.conv3d_transpose":
                out = transposed3d(call, self.builder_)
                if out is None:
                    return call
                changed.append(call)
                return out
            if name != "relax.nn.conv2d_transpose":
                return call
            attrs = call.attrs
            layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
            if layouts == ("NCHW", "IOHW", "NCHW") or not _permutations(layouts):
                return call  # TVM's own, or a layout (blocked, ...) this does not know
            changed.append(call)
            out = subpixel(call, self.builder_)  # a constant kernel: an ordinary convolution
            if out is not None:
                return out
            if _depth_to_space(call):  # a kernel computed at run time: 1x1 when kernel = stride
                return self._as_conv(call)
            return self._in_nchw(call)

        def _as_conv(self, call):
            data, weight = call.args
            n, h, w, cin = (int(d) for d in data.ty.shape)
            kh, kw = (int(k) for k in call.attrs.strides)
            cout = int(call.ty.shape[3])
            dtype = str(call.ty.dtype)
            # HWIO [1, 1, Cin, (a, b, o)] from the kernel [i, o, a, b], computed at run time (a
            # constant one is ``subpixel``'s)
            axes = [str(call.attrs.kernel_layout).index(c) for c in "IHWO"]
            kernel = self.builder_.emit(relax.op.permute_dims(weight, axes))
            kernel = self.builder_.emit(relax.op.reshape(kernel, (1, 1, cin, kh * kw * cout)))
            out = self.builder_.emit(relax.op.nn.conv2d(
                data, kernel, data_layout="NHWC", kernel_layout="HWIO", out_layout="NHWC",
                out_dtype=dtype))
            out = self.builder_.emit(relax.op.reshape(out, (n, h, w, kh, kw, cout)))
            out = self.builder_.emit(relax.op.permute_dims(out, [0, 1, 3, 2, 4, 5]))
            return relax.op.reshape(out, (n, h * kh, w * kw, cout))

        def _in_nchw(self, call):
            data, weight = call.args
            attrs = call.attrs
            data = self._permuted(data, [str(attrs.data_layout).index(c) for c in "NCHW"])
            weight = self._permuted(weight, [str(attrs.kernel_layout).index(c) for c in "IOHW"])
            out = self.builder_.emit(relax.op.nn.conv2d_transpose(
                data, weight, strides=attrs.strides, padding=attrs.padding,
                output_padding=attrs.output_padding, dilation=attrs.dilation,
                groups=attrs.groups, data_layout="NCHW", kernel_layout="IOHW",
                out_layout="NCHW", out_dtype=str(call.ty.dtype)))
            return relax.op.permute_dims(out, ["NCHW".index(c) for c in str(attrs.out_layout)])

        def _permuted(self, expr, axes):
            if axes == sorted(axes):
                return expr
            return self.builder_.emit(relax.op.permute_dims(expr, axes))

    changed: list = []

    @relax.transform.function_pass(opt_level=0, name="TensortuneTransposedConvolutions")
    def apply(func, mod, _ctx):
        changed.clear()
        out = Rewrite(mod).visit_expr(func)
        return out if changed else func  # a model without one comes back as it was

    return apply


def _permutations(layouts) -> bool:
    """Whether the data, kernel and output layouts are plain orders of NCHW, IOHW, NCHW."""
    return all(sorted(layout) == sorted(axes)
               for layout, axes in zip(layouts, ("NCHW", "IOHW", "NCHW")))


def _depth_to_space(call) -> bool:
    """An NHWC transposed convolution of static shape whose kernel equals its stride: no
    padding, output padding, dilation or groups (each input pixel fills its own block)."""
    from tvm import relax

    attrs = call.attrs
    if (str(attrs.data_layout), str(attrs.out_layout)) != ("NHWC", "NHWC") \
            or int(attrs.groups) != 1:
        return False
    if any(int(v) != 0 for v in list(attrs.padding) + list(attrs.output_padding)) \
            or any(int(d) != 1 for d in attrs.dilation):
        return False
    shapes = [getattr(e.ty, "shape", None) for e in (call.args[0], call.args[1], call)]
    if any(s is None or not all(isinstance(d, int) or isinstance(getattr(d, "value", None), int)
                                for d in s) for s in shapes):
        return False
    kernel = dict(zip(str(attrs.kernel_layout), (int(d) for d in call.args[1].ty.shape)))
    return [kernel["H"], kernel["W"]] == [int(s) for s in attrs.strides] \
        and isinstance(call.args[0].ty, relax.TensorType)


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
    """Rewrite ``clip(x, lo, hi)`` (ReLU6) as ``minimum(maximum(x, lo), hi)``, and
    ``leakyrelu(x, a)`` with ``0 <= a <= 1`` as ``maximum(x, a * x)``.

    Neither has a layout rule in TVM 0.27, so ``ConvertLayout`` would wrap every ReLU6 of a
    MobileNet (every LeakyReLU of a 3-D U-Net, a YOLO or a GAN) in a transpose pair; ``maximum``,
    ``minimum`` and ``multiply`` follow their input's layout and fuse into the convolution
    before them just the same.
    """
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    clip = is_op("relax.clip")(wildcard(), wildcard(), wildcard())
    leaky = is_op("relax.nn.leakyrelu")(wildcard())

    def min_max(expr, _matches):
        x, lo, hi = expr.args
        dtype = str(x.ty.dtype)
        bounds = [_scalar(v) for v in (lo, hi)]
        if None in bounds or not dtype.startswith("float"):
            return expr
        low = relax.op.maximum(x, relax.const(bounds[0], dtype))
        return relax.op.minimum(low, relax.const(bounds[1], dtype))

    def leaky_max(expr, _matches):
        x = expr.args[0]
        dtype = str(x.ty.dtype)
        alpha = float(expr.attrs.alpha)
        if not dtype.startswith("float") or not 0.0 <= alpha <= 1.0:
            return expr
        return relax.op.maximum(x, relax.op.multiply(x, relax.const(alpha, dtype)))

    @relax.transform.function_pass(opt_level=0, name="TensortuneClipAsMinMax")
    def apply(func, _mod, _ctx):
        return rewrite_call(leaky, leaky_max, rewrite_call(clip, min_max, func))

    return apply


def _scalar(value):
    """The Python number of a constant bound (a ``FloatImm``/``IntImm``, or a ``PrimValue``
    holding one), else None."""
    for _ in range(2):
        value = getattr(value, "value", None)
        if isinstance(value, (int, float)):
            return float(value)
    return None
