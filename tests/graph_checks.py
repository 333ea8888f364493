"""What the whole-model rewrite tests share: a PyTorch module exported to ONNX and imported
with its expected output, and the operator calls of a prepared module."""
from __future__ import annotations

import warnings


def onnx_model(module, inputs: tuple, path, opset: int = 13):
    """``(imported model, the inputs as numpy, PyTorch's output)`` for ``module`` (in eval
    mode) exported to ``path`` by the legacy exporter, as users' old exports were made."""
    import torch

    from tensortune.frontend import from_onnx

    with torch.no_grad():
        expected = module(*inputs).numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter announces its deprecation
        torch.onnx.export(module, inputs, str(path), dynamo=False, opset_version=opset)
    return from_onnx(path), tuple(x.numpy() for x in inputs), expected


def op_calls(mod) -> list:
    """The operator calls of ``mod``'s main function, in order."""
    import tvm
    from tvm import relax

    found: list = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e) if isinstance(
        e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    return found


def op_names(mod) -> list[str]:
    """The names of the operators ``mod``'s main function calls, in order."""
    return [c.op.name for c in op_calls(mod)]
