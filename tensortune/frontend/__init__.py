"""Whole-model import: PyTorch (``torch.export``) and ONNX to a Relax ``Model``."""
from .model import Model, ModelImportError, TensorInfo, UnsupportedOperatorError
from .onnx_import import from_onnx, unsupported_ops
from .torch_import import from_torch

__all__ = ["Model", "TensorInfo", "ModelImportError", "UnsupportedOperatorError", "from_torch",
           "from_onnx", "unsupported_ops"]
