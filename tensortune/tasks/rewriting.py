"""What the whole-model rewrites share: the call a variable is bound to, a mutator run over
every Relax function of a module, whether a module calls an operator, how often each variable
is read, static shapes and scalar constants."""
from __future__ import annotations


def bound_call(mutator, var, op: str):
    """The call bound to ``var`` in the function ``mutator`` is visiting when it is one of ``op``
    (a Relax op name such as ``relax.take``), else None."""
    from tvm import relax

    if not isinstance(var, relax.Var):
        return None
    value = mutator.lookup_binding(var)
    if isinstance(value, relax.Call) and getattr(value.op, "name", None) == op:
        return value
    return None


def single_use_call(mutator, uses: dict, var, *ops):
    """The call bound to ``var`` when ``var`` is read once (``uses``: ``use_counts``) and, if
    ``ops`` are given, the call is one of them; else None."""
    from tvm import relax

    if not isinstance(var, relax.Var) or uses.get(var, 0) != 1:
        return None
    value = mutator.lookup_binding(var)
    if not isinstance(value, relax.Call):
        return None
    return value if not ops or getattr(value.op, "name", "") in ops else None


def mutate_functions(mutator, mod):
    """``mod`` with every Relax function visited by ``mutator`` (a ``PyExprMutator`` made on
    ``mod``)."""
    from tvm import relax

    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()


def calls_op(mod, op: str) -> bool:
    """Whether a Relax function of ``mod`` calls ``op`` (a name such as ``relax.nn.conv1d``)."""
    from tvm import relax

    found: list = []
    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, lambda e: found.append(e) if isinstance(
                e, relax.Call) and getattr(e.op, "name", "") == op else None)
    return bool(found)


def use_counts(mod) -> dict:
    """How often each Relax variable is read (as an argument, in a tuple, as a result), over
    all functions of ``mod``; the visitor does not see a binding's own variable."""
    from tvm import relax

    counts: dict = {}

    def visit(expr):
        if isinstance(expr, relax.Var):
            counts[expr] = counts.get(expr, 0) + 1

    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return counts


def static_shape(expr) -> list[int] | None:
    """The shape of a tensor whose every dimension is a known integer, else None."""
    from tvm.ir.prim import IntImm

    shape = getattr(expr.ty, "shape", None)
    if shape is None or not all(isinstance(d, IntImm) for d in shape):
        return None
    return [int(d) for d in shape]


def float_scalar(expr):
    """The value of a float constant with a single element, else None."""
    from tvm.ir import GenericConst  # TVM 0.27's relax constant

    if not isinstance(expr, GenericConst):
        return None
    value = expr.value.numpy()
    if value.size != 1 or value.dtype.kind != "f":
        return None
    return float(value.reshape(()))
