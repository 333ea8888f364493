"""PyTorch import: ``torch.export`` then TVM's exported-program translator."""
from __future__ import annotations

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
    return Model.from_ir(mod, "torch", name or type(module).__name__)


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
