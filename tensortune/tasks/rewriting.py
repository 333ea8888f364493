"""What the whole-model rewrites share: the call a variable is bound to, and a mutator run over
every Relax function of a module."""
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


def mutate_functions(mutator, mod):
    """``mod`` with every Relax function visited by ``mutator`` (a ``PyExprMutator`` made on
    ``mod``)."""
    from tvm import relax

    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()
