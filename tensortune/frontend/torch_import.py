"""PyTorch import: ``torch.export`` then TVM's exported-program translator."""
from __future__ import annotations

import math
import re
import warnings

from .model import Model, ModelImportError, UnsupportedOperatorError

_MISSING = re.compile(r"Unsupported function types \[(.*?)\]", re.S)


def from_torch(module, example_inputs: tuple, name: str | None = None) -> Model:
    """Import ``module`` (run in inference mode) traced on ``example_inputs``.

    Weights become constants of the Relax module. Raises ``UnsupportedOperatorError`` naming
    the ATen operators TVM cannot convert, ``ModelImportError`` if ``torch.export`` fails.
    """
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    if not isinstance(example_inputs, tuple):
        raise TypeError(f"example_inputs must be a tuple of tensors, "
                        f"got {type(example_inputs).__name__}")
    was_training = module.training
    module.eval()  # batch-norm and dropout must be exported in their inference form
    with warnings.catch_warnings():
        # torch's pytree code trips over its own deprecations (LeafSpec); not the user's concern
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        try:
            with torch.no_grad():
                program = torch.export.export(module, example_inputs)
        except Exception as err:  # torch raises many kinds (Unsupported, UserError, ...)
            raise ModelImportError(f"torch.export failed: {_first_line(err)}") from err
        finally:
            module.train(was_training)
        mod = _convert(program, from_exported_program)
    return Model.from_ir(normalize_negative_indices(mod), "torch", name or type(module).__name__)


def normalize_negative_indices(mod):
    """``mod`` with the constant negative indices of ``take`` and ``index_tensor`` counted
    from the end of their axis, as PyTorch counts them.

    TVM 0.27's torch frontend turns ``x[:, -1]`` (``aten.select.int``) and ``x[:, [-1, 0]]``
    (``aten.index.Tensor`` of a constant list) into ``take(x, -1, mode="fast")``, whose
    kernel reads before the start of the tensor (GPT-2's last-position logits came out wrong,
    not as an error). Slices are fine: ``strided_slice`` counts negative bounds itself. An
    index computed at run time is left as it is (``embedding`` and ``index_select`` refuse
    negative ones in PyTorch too)."""
    import numpy as np
    from tvm import relax
    from tvm.ir import GenericConst

    def normalized(index, size: int | None):
        if not isinstance(index, GenericConst) or size is None:
            return None
        value = index.value.numpy()
        if not np.issubdtype(value.dtype, np.integer) or not (value < 0).any():
            return None
        return relax.const(np.where(value < 0, value + size, value).astype(value.dtype),
                           str(value.dtype))

    @relax.expr_functor.mutator
    class Normalize(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = getattr(call.op, "name", "")
            if name == "relax.take":
                data, index = call.args
                axis = call.attrs.axis
                fixed = normalized(index, _extent(data, None if axis is None else int(axis)))
                if fixed is not None:
                    changed.append(call)
                    return relax.op.take(data, fixed, axis, str(call.attrs.mode))
            elif name == "relax.index_tensor" and isinstance(call.args[1], relax.Tuple):
                data, indices = call.args[0], list(call.args[1].fields)
                fixed = [normalized(index, _extent(data, axis)) for axis, index in
                         enumerate(indices)]
                if any(f is not None for f in fixed):
                    changed.append(call)
                    return relax.op.index_tensor(data, [f if f is not None else index for f, index
                                                        in zip(fixed, indices)])
            return call

    changed: list = []
    normalize = Normalize(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            normalize.builder_.update_func(gv, normalize.visit_expr(func))
    # a model without such an index comes back as it was (its tasks' keys unchanged)
    return normalize.builder_.get() if changed else mod


def _extent(data, axis: int | None) -> int | None:
    """The static length of ``data``'s ``axis`` (None: of the flattened tensor), else None."""
    shape = getattr(getattr(data, "ty", None), "shape", None)
    try:
        dims = [int(d) for d in shape]
    except (TypeError, ValueError):  # unknown rank, or a symbolic dimension
        return None
    if axis is None:
        return math.prod(dims)
    return dims[axis] if -len(dims) <= axis < len(dims) else None


def _convert(program, from_exported_program):
    try:
        return from_exported_program(program)
    except AssertionError as err:
        match = _MISSING.search(str(err))
        if match is None:
            raise ModelImportError(f"torch frontend failed: {_first_line(err)}") from err
        ops = [op.strip().strip("'\"") for op in match.group(1).split(",") if op.strip()]
        raise UnsupportedOperatorError("torch", ops) from err
    except Exception as err:  # a converter that exists but refuses its arguments
        raise ModelImportError(f"torch frontend failed: {_first_line(err)}") from err


def _first_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[0][:300] if lines else ''}"
