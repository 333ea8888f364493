"""Checking an uploaded model before it is accepted: ONNX only, parsed as data, never run.

ONNX is a protobuf: parsing it executes nothing. The checks, cheapest first: size, protobuf,
a graph with nodes, ONNX's own checker, external tensor data (refused: a path on the client's
disk), every operator known to the importer, and static input shapes (a symbolic dimension,
such as a dynamic batch, is fixed to 1 and said so).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field


class UploadError(ValueError):
    """A model that is refused; the message names the problem."""


class UploadTooLarge(UploadError):
    pass


@dataclass(frozen=True)
class ModelInfo:
    name: str
    sha256: str
    size: int
    inputs: dict[str, list[int]]  # name -> the shape it will be tuned for
    notes: tuple[str, ...] = field(default=())


def check_model(data: bytes, filename: str = "", max_bytes: int | None = None) -> ModelInfo:
    """``ModelInfo`` of an acceptable ONNX model, or ``UploadError`` naming what is wrong."""
    import onnx
    from google.protobuf.message import DecodeError

    if max_bytes is not None and len(data) > max_bytes:
        raise UploadTooLarge(f"the model is {len(data) / 2**20:.1f} MiB; this server takes "
                             f"at most {max_bytes / 2**20:.0f} MiB")
    if not data:
        raise UploadError("the model file is empty")
    try:
        model = onnx.load_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise UploadError(f"not an ONNX model (the protobuf does not parse: {err})") from None
    if not model.opset_import or not model.graph.node or not model.graph.output:
        raise UploadError("not an ONNX model: no opset, nodes or outputs (a truncated file, "
                          "or another format)")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:
        first = next((ln for ln in str(err).splitlines() if ln.strip()), str(err))
        raise UploadError(f"the ONNX checker refuses the model: {first[:300]}") from None
    external = [t.name for t in model.graph.initializer
                if t.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        raise UploadError(f"tensors stored outside the file ({', '.join(external[:3])}...): "
                          "save the model with all tensors inside it")
    from ..frontend.onnx_import import unsupported_ops

    missing = unsupported_ops(model)
    if missing:
        raise UploadError(f"the importer has no converter for: {', '.join(missing)}")
    inputs, notes = _inputs(model)
    if not inputs:
        raise UploadError("the model has no inputs to feed")
    name = _clean(filename.rsplit(".", 1)[0]) or _clean(model.graph.name) or "model"
    return ModelInfo(name, hashlib.sha256(data).hexdigest(), len(data), inputs, tuple(notes))


def _inputs(model) -> tuple[dict[str, list[int]], list[str]]:
    import onnx

    initializers = {t.name for t in model.graph.initializer}
    shapes, notes = {}, []
    for inp in model.graph.input:
        if inp.name in initializers:
            continue
        tensor = inp.type.tensor_type
        if not inp.type.HasField("tensor_type") or not tensor.HasField("shape"):
            raise UploadError(f"input {inp.name!r} is not a tensor of known rank")
        try:
            onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        except KeyError:
            raise UploadError(f"input {inp.name!r} has an unknown element type "
                              f"{tensor.elem_type}") from None
        dims = []
        for i, d in enumerate(tensor.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            else:
                dims.append(1)
                notes.append(f"input {inp.name!r} dimension {i} "
                             f"({d.dim_param or 'unknown'}) is tuned as 1")
        shapes[inp.name] = dims
    return shapes, notes


def _clean(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text or "").strip("_.")[:64]
