"""Zero padding taken into the convolution after it, and ONNX's padding as Relax's ``nn.pad``.

A causal 1-D convolution (WaveNet, a TCN, a streaming speech encoder) pads its input on the
left only, ``F.pad(x, (d, 0))``, and a network converted from TensorFlow pads before each
strided convolution ("SAME" padding, asymmetric). Left as an operator of its own, the pad
copies the activation once more per layer, and TVM's ONNX converter writes it as ``call_tir``
of TOPI's ``pad``: a PrimFunc the layout conversion cannot see into, so an NHWC model went
back to NCW around each one (a WaveNet-style network through ONNX ran a transpose-pad-transpose
kernel before each dilated convolution). A convolution takes asymmetric padding itself, so
``conv(pad(x, before, after), w)`` is ``conv(x, w)`` with ``before`` and ``after`` added to its
own padding, when the pad is zeros on the image axes only.

Each ``call_tir`` of TOPI's constant ``pad`` (checked structurally against one generated here)
becomes ``relax.op.nn.pad`` first, which is what ``torch.export`` gives for the same network,
so both imports fold alike. A pad of another value, or one something else reads too, stays (the
layout conversion has no rule for ``nn.pad``: it stays in the model's layout, between
transposes, as before).
"""
from __future__ import annotations

import re

from .rewriting import bound_call, mutate_functions, static_shape

REWRITE = "padding into the convolution"
# the convolutions, their number of image axes, and the layouts whose first two axes are
# batch and channels (the model's own, before the layout conversion)
CONVS = {"relax.nn.conv1d": (1, "NCW"), "relax.nn.conv2d": (2, "NCHW"),
         "relax.nn.conv3d": (3, "NCDHW")}
MAX_CANDIDATES = 4096  # pad amounts tried against a PrimFunc, at most


def fold_pads_pass():
    """A module pass: TOPI's constant pads as ``nn.pad``, and each zero ``nn.pad`` of the
    image axes that a convolution reads folded into that convolution's padding (module
    docstring); the pad stays for any other reader."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    call_tir = tvm.ir.Op.get("relax.call_tir")

    @mutator
    class Fold(PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.mod = mod
            self.widths: dict = {}  # (PrimFunc name, input type) -> pad_width or None

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op.same_as(call_tir):
                return self.as_relax(call)
            kind = CONVS.get(getattr(call.op, "name", ""))
            return call if kind is None else self.folded(call, *kind)

        def as_relax(self, call):
            """A ``call_tir`` of TOPI's zero-or-constant ``pad`` as ``relax.op.nn.pad``."""
            if len(call.args) != 2 or not isinstance(call.args[1], relax.Tuple) \
                    or len(call.args[1].fields) != 1 \
                    or not re.fullmatch(r"pad\d*", call.args[0].name_hint):
                return call
            (data,) = call.args[1].fields
            key = (call.args[0].name_hint, str(getattr(data, "ty", None)))
            if key not in self.widths:
                self.widths[key] = topi_pad(self.mod[call.args[0]], data, call)
            found = self.widths[key]
            if found is None:
                return call
            width, value = found
            return relax.op.nn.pad(data, width, pad_value=value)

        def folded(self, call, dims: int, layout: str):
            attrs = call.attrs
            if attrs.data_layout != layout:
                return call
            pad = bound_call(self, call.args[0], "relax.nn.pad")
            if pad is None or pad.attrs.pad_mode != "constant" \
                    or float(pad.attrs.pad_value) != 0.0:
                return call
            width = [int(w) for w in pad.attrs.pad_width]  # (before, after) per axis
            if len(width) != 2 * (2 + dims) or any(width[:4]) or min(width) < 0:
                return call
            own = [int(p) for p in attrs.padding]  # the image axes' befores, then afters
            padding = ([p + b for p, b in zip(own[:dims], width[4::2])]
                       + [p + a for p, a in zip(own[dims:], width[5::2])])
            op = getattr(relax.op.nn, call.op.name.split(".")[-1])
            return op(pad.args[0], call.args[1], strides=attrs.strides, padding=padding,
                      dilation=attrs.dilation, groups=attrs.groups,
                      data_layout=attrs.data_layout, kernel_layout=attrs.kernel_layout,
                      out_layout=attrs.out_layout, out_dtype=str(call.ty.dtype))

    @tvm.transform.module_pass(opt_level=0, name="TensortuneFoldPads")
    def apply(mod, _ctx):
        out = mutate_functions(Fold(mod), mod)
        return relax.transform.DeadCodeElimination()(out)

    return apply


def topi_pad(func, data, call):
    """``(pad_width, pad_value)`` in ``nn.pad``'s form when ``func`` is exactly TOPI's
    constant ``pad`` of ``data`` to ``call``'s shape, else None. The amounts before each axis
    are tried from the numbers the PrimFunc holds (``T.int64(2) <= v_i2``)."""
    import itertools

    import tvm_ffi

    from ..frontend.onnx_clip import lone_float

    shape, out = static_shape(data), static_shape(call)
    if shape is None or out is None or len(shape) != len(out) \
            or any(o < s for s, o in zip(shape, out)):
        return None
    text = func.script()
    value = lone_float(text)
    if value is None:
        return None
    numbers = {int(n) for n in re.findall(r"T\.int64\((\d+)\)", text)}
    totals = [o - s for s, o in zip(shape, out)]
    choices = [sorted({0, t} | {n for n in numbers if n <= t}) if t else [0] for t in totals]
    count = 1
    for c in choices:
        count *= len(c)
    if count > MAX_CANDIDATES:
        return None
    for before in itertools.product(*choices):
        after = [t - b for t, b in zip(totals, before)]
        if tvm_ffi.structural_equal(func, _emitted_pad(data.ty, list(before), after, value),
                                    map_free_vars=True):
            return [w for pair in zip(before, after) for w in pair], value
    return None


def _emitted_pad(ty, before: list[int], after: list[int], value: float):
    """TOPI's ``pad`` as the ONNX converter emits it (``emit_te`` on a Relax tensor: its
    iteration domains are int64, as ``te.create_prim_func`` of a placeholder's are not)."""
    from tvm import relax, topi

    builder = relax.BlockBuilder()
    x = relax.Var("x", ty)
    with builder.function("main", [x]):
        with builder.dataflow():
            out = builder.emit_output(builder.emit_te(topi.nn.pad, x, before, after, value))
        builder.emit_func_output(out)
    mod = builder.get()
    (prim,) = [f for gv, f in mod.functions_items() if gv.name_hint != "main"]
    return prim
