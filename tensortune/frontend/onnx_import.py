"""ONNX import through TVM's Relax ONNX frontend, with operators checked before converting."""
from __future__ import annotations

import os

from .model import Model, ModelImportError, UnsupportedOperatorError
from .onnx_fold import fold_shape_arithmetic

# the converter keys operators by op_type alone; a node of another domain would be converted
# as the standard operator of the same name, so only these domains are trusted
KNOWN_DOMAINS = ("", "ai.onnx", "com.microsoft")
DIRECT_OPS = frozenset({"If", "Constant"})  # handled by the importer outside its converter map


def from_onnx(path_or_model, input_shapes: dict[str, tuple[int, ...]] | None = None,
              name: str | None = None) -> Model:
    """Import an ONNX model (a file path or a ``ModelProto``).

    ``input_shapes`` fixes the shape of inputs by name; it is required for inputs with symbolic
    dimensions (e.g. a dynamic batch). Raises ``UnsupportedOperatorError`` naming every operator
    the converter lacks before anything is converted.
    """
    import onnx
    from tvm.relax.frontend.onnx import from_onnx as relax_from_onnx

    if isinstance(path_or_model, (str, os.PathLike)):
        try:
            model = onnx.load(os.fspath(path_or_model))
        except Exception as err:  # protobuf DecodeError, missing file, ...
            raise ModelImportError(f"cannot read ONNX model {os.fspath(path_or_model)}: "
                                   f"{err}") from err
        name = name or os.path.splitext(os.path.basename(os.fspath(path_or_model)))[0]
    else:
        model = path_or_model
    unsupported = unsupported_ops(model)
    if unsupported:
        raise UnsupportedOperatorError("onnx", unsupported)
    shape_dict, dtype_dict = _signature(model, dict(input_shapes or {}))
    model = fold_shape_arithmetic(model, shape_dict)
    try:
        mod = relax_from_onnx(model, shape_dict=shape_dict, dtype_dict=dtype_dict)
    except Exception as err:  # the converter's own check and converters refusing attributes
        message = str(err)
        marker = "not supported for frontend ONNX:"
        if marker in message:
            ops = message.split(marker, 1)[1].splitlines()[0].split(",")
            raise UnsupportedOperatorError("onnx", [o.strip() for o in ops if o.strip()]) from err
        first = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
        raise ModelImportError(f"onnx frontend failed: {type(err).__name__}: "
                               f"{first[:300]}") from err
    return Model.from_ir(mod, "onnx", name or model.graph.name or "onnx_model")


def unsupported_ops(model) -> list[str]:
    """Operators of ``model`` (subgraphs included) that the installed converter cannot handle;
    a node of a foreign domain is named ``domain::op_type``."""
    from tvm.relax.frontend.onnx import onnx_frontend

    get_map = getattr(onnx_frontend, "_get_convert_map", None)
    known = set(get_map()) if get_map is not None else None
    missing = set()
    for node in _nodes(model.graph):
        if node.domain not in KNOWN_DOMAINS:
            missing.add(f"{node.domain}::{node.op_type}")
        elif known is not None and node.op_type not in known and node.op_type not in DIRECT_OPS:
            missing.add(node.op_type)
    return sorted(missing)


def _nodes(graph):
    import onnx

    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _nodes(g)


def _signature(model, input_shapes: dict) -> tuple[dict, dict]:
    """Static shapes and dtypes of the graph inputs (initializers excluded)."""
    import onnx

    initializers = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    names = [i.name for i in inputs]
    unknown = set(input_shapes) - set(names)
    if unknown:
        raise ModelImportError(f"input_shapes names unknown input(s) {sorted(unknown)}; "
                               f"the model's inputs are {names}")
    shapes, dtypes = {}, {}
    for inp in inputs:
        tensor_type = inp.type.tensor_type
        dtypes[inp.name] = str(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        if inp.name in input_shapes:
            shapes[inp.name] = [int(d) for d in input_shapes[inp.name]]
            continue
        dims = tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            shown = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
            raise ModelImportError(f"input {inp.name!r} has a symbolic shape {shown}; "
                                   f"pass input_shapes={{{inp.name!r}: (...)}}")
        shapes[inp.name] = [int(d.dim_value) for d in dims]
    return shapes, dtypes
