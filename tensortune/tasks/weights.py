"""Weights out of the library: a built model's constants become parameters of ``main``.

After scheduling and ``FoldConstant`` every weight (folded batch norm, packed layouts, Winograd
transforms) is a constant of the Relax ``main``; compiled as such it is baked into the shared
library (ResNet-18: 97 MB). ``lift_weights`` turns each constant of at least ``min_bytes``
into a parameter after the model's inputs, in order of first use, and returns the values, so
the library is small, the weights are a file of their own and can be swapped, and a GPU build
uploads them once. Smaller constants (scalars, shapes) stay in the library.
"""
from __future__ import annotations

import dataclasses

import numpy as np

MIN_BYTES = 1024  # smaller constants stay compiled in: a parameter each would cost a VM argument


@dataclasses.dataclass(frozen=True)
class Weight:
    """One lifted constant: its parameter name and value (as the compiled ``main`` takes it)."""

    name: str
    value: np.ndarray


def lift_weights(mod, min_bytes: int = MIN_BYTES) -> tuple[object, tuple[Weight, ...]]:
    """``(module, weights)``: ``mod`` with the large constants of ``main`` as parameters
    appended to its inputs (``num_input`` marks where the inputs end), and their values."""
    from tvm import relax

    main = mod["main"]
    lifted: list[tuple[object, relax.Var]] = []  # (constant, its parameter), in first use

    @relax.expr_functor.mutator
    class Lift(relax.PyExprMutator):
        def visit_generic_const_(self, const):
            if const.value.numpy().nbytes < min_bytes:
                return const
            for seen, var in lifted:
                if seen.same_as(const):
                    return var
            var = relax.Var(f"w{len(lifted)}", const.ty)
            lifted.append((const, var))
            return var

    body = Lift(mod).visit_expr(main.body)
    if not lifted:
        return mod, ()
    num_input = len(main.params)
    attrs = dict(main.attrs.items()) if main.attrs is not None else {}
    attrs["num_input"] = num_input
    func = relax.Function(list(main.params) + [v for _, v in lifted], body, main.ret_ty,
                          main.is_pure, main.attrs, main.span).with_attrs(attrs)
    out = mod.clone() if hasattr(mod, "clone") else mod
    out["main"] = func
    weights = tuple(Weight(str(var.name), np.require(const.value.numpy(), requirements="C"))
                    for const, var in lifted)
    return out, weights
