"""ONNX's ``Clip`` as Relax's ``maximum`` and ``minimum`` operators.

TVM's ONNX converter writes ``Clip`` (ReLU6 in every MobileNet) as ``call_tir`` of TOPI's
``maximum`` and ``minimum``: PrimFuncs that the layout conversion cannot see into, so an NHWC
model went back to NCHW around each of them (MobileNet V2 through ONNX ran
``transpose-maximum-minimum-transpose`` kernels after its convolutions, where the same network
through torch.export fuses the clip into the convolution). Each such call whose PrimFunc is
exactly TOPI's (checked structurally against one generated here) becomes the Relax operator.
"""
from __future__ import annotations

import re

_KINDS = ("maximum", "minimum")


def clip_as_relax_ops(mod):
    """``mod`` with every ``call_tir`` of TOPI's ``maximum``/``minimum`` of a tensor and a
    constant bound (an input of the call, or a number inside the PrimFunc: ``Clip``'s
    attributes before opset 11) replaced by ``relax.op.maximum``/``minimum``."""
    import tvm
    from tvm import relax

    # the converter guards each bound against NaN (where(isnan(b), inf, b)): folded, a
    # constant bound is a constant again
    mod = relax.transform.FoldConstant()(mod)
    call_tir = tvm.ir.Op.get("relax.call_tir")
    replaced = False
    bounds = {}  # (function, argument types) -> its bound or None: checked once, not per call

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(call_tir) or len(call.args) != 2 \
                    or not isinstance(call.args[1], relax.Tuple):
                return call
            kind = re.sub(r"\d+$", "", call.args[0].name_hint)
            if kind not in _KINDS:
                return call
            nonlocal replaced
            args = list(call.args[1].fields)
            key = (call.args[0].name_hint, tuple(str(getattr(a, "ty", None)) for a in args))
            if key not in bounds:
                bounds[key] = _bound(mod[call.args[0]], kind, args)
            if bounds[key] is None:
                return call
            replaced = True
            # a bound given as an input is this call's own; one inside the function is shared
            bound = args[1] if len(args) == 2 else bounds[key]
            return getattr(relax.op, kind)(args[0], bound)

    rewriter = Rewriter(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    out = rewriter.builder_.get()
    return relax.transform.DeadCodeElimination()(out) if replaced else mod


def _bound(func, kind: str, args: list):
    """The bound (a Relax constant) if ``func`` is ``topi.<kind>(x, bound)`` of ``args``."""
    import tvm_ffi
    from tvm import relax, te, tirx, topi
    from tvm.ir import GenericConst

    x = args[0]
    if not isinstance(getattr(x, "ty", None), relax.TensorType) or x.ty.shape is None:
        return None
    dtype = x.ty.dtype
    shape = [tirx.IntImm("int64", int(d)) for d in x.ty.shape.values]
    data = te.placeholder(shape, dtype, name="x")
    if len(args) == 2 and isinstance(args[1], GenericConst):
        value = te.placeholder([tirx.IntImm("int64", int(d)) for d in args[1].value.shape],
                               str(args[1].value.dtype), name="b")
        expected = te.create_prim_func([data, value, getattr(topi, kind)(data, value)])
        bound = args[1]
    elif len(args) == 1:
        # a wrong reading only fails the structural check below
        number = lone_float(func.script())
        if number is None:
            return None
        expected = te.create_prim_func([data, getattr(topi, kind)(data, number)])
        bound = relax.const(number, dtype)
    else:
        return None
    same = tvm_ffi.structural_equal(func, expected.without_attr("global_symbol"),
                                    map_free_vars=True)
    return bound if same else None


def lone_float(script: str) -> float | None:
    """The one float constant of a PrimFunc's TVMScript (``T.float32(6.0)``,
    ``T.float32("inf")``), or None where it has none or several."""
    numbers = re.findall(r"T\.float\d+\(([^()]*)\)", script)
    if len(numbers) != 1:
        return None
    try:
        return float(numbers[0].strip("'\""))
    except ValueError:
        return None
