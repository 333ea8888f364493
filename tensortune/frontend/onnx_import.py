"""ONNX import through TVM's Relax ONNX frontend, with operators checked before converting."""
from __future__ import annotations

import os
import re
import warnings

from ..errors import strict
from .model import Model, ModelImportError, UnsupportedOperatorError
from .onnx_clip import clip_as_relax_ops
from .onnx_fold import fold_shape_arithmetic, upgrade_old_nodes
from .onnx_recurrence import cut_shapes, stitch_layers
from .onnx_rnn import RECURRENT, lower_recurrent, unroll_recurrent

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

    if isinstance(path_or_model, (str, os.PathLike)):
        try:
            model = onnx.load(os.fspath(path_or_model))
        except Exception as err:  # protobuf DecodeError, missing file, ...
            raise ModelImportError(f"cannot read ONNX model {os.fspath(path_or_model)}: "
                                   f"{err}") from err
        name = name or os.path.splitext(os.path.basename(os.fspath(path_or_model)))[0]
    else:
        model = path_or_model
    unsupported = [op for op in unsupported_ops(model) if op not in RECURRENT]
    if unsupported:
        raise UnsupportedOperatorError("onnx", unsupported)
    shape_dict, dtype_dict = _signature(model, dict(input_shapes or {}))
    model = fold_shape_arithmetic(model, shape_dict)
    lowered, layers = lower_recurrent(model)
    cut = cut_shapes(layers)  # the layers' outputs, graph inputs while the converter runs
    mod = _convert(lowered, {**shape_dict, **cut}, {**dtype_dict, **dict.fromkeys(cut, "float32")})
    if layers:
        try:
            mod = stitch_layers(mod, layers, len(shape_dict), len(model.graph.output))
        except Exception:  # a graph the stitch does not follow: every layer unrolled instead
            if strict():  # TENSORTUNE_STRICT: raise what would be swallowed
                raise
            mod = _convert(unroll_recurrent(model), shape_dict, dtype_dict)
    try:
        mod = pairwise_variadic_ops(mod)
    except Exception:  # the stacked form computes the same (the NHWC conversion hides it)
        if strict():  # TENSORTUNE_STRICT: raise what would be swallowed
            raise
    try:
        mod = clip_as_relax_ops(mod)
    except Exception:  # TOPI's kernels compute the same (between layout changes)
        if strict():
            raise
    return Model.from_ir(mod, "onnx", name or model.graph.name or "onnx_model")


def _convert(model, shape_dict: dict, dtype_dict: dict):
    """TVM's converter on ``model`` (nodes of a later form under an old opset upgraded), its
    failures as ``UnsupportedOperatorError`` or ``ModelImportError``."""
    from tvm.relax.frontend.onnx import from_onnx as relax_from_onnx

    try:
        model, upgraded = upgrade_old_nodes(model)
    except Exception:  # a node this cannot read: the converter gets it as it was
        upgraded = []
    try:
        with warnings.catch_warnings():
            for node in upgraded:  # a later form under the old opset, as the converter wants
                warnings.filterwarnings("ignore", message=rf"(?s).*Name: {re.escape(node)} ")
            return relax_from_onnx(model, shape_dict=shape_dict, dtype_dict=dtype_dict)
    except Exception as err:  # the converter's own check and converters refusing attributes
        message = str(err)
        marker = "not supported for frontend ONNX:"
        if marker in message:
            ops = message.split(marker, 1)[1].splitlines()[0].split(",")
            raise UnsupportedOperatorError("onnx", [o.strip() for o in ops if o.strip()]) from err
        first = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
        raise ModelImportError(f"onnx frontend failed: {type(err).__name__}: "
                               f"{first[:300]}") from err


# ONNX's variadic elementwise operators as the converter writes them (a reduction over a stack
# of the inputs broadcast to one shape), and the binary operator that computes them pairwise
_VARIADIC = {"relax.sum": "add", "relax.mean": "add", "relax.max": "maximum",
             "relax.min": "minimum"}


def pairwise_variadic_ops(mod):
    """``mod`` with each ``Sum``/``Mean``/``Max``/``Min`` of the converter (``reduce(stack(
    broadcast_to(x_i)), axis=0)``) computed pairwise, ``add(x_1, x_2)`` and so on.

    The stacked form copies every input into a new tensor and reduces it in a kernel of its
    own, where a binary operator fuses into the convolution before it (old ResNets write
    their residual additions as ``Sum``); and TVM's layout rule for ``stack`` names the new
    axis "S", which no later operator can read, so the NHWC conversion had to leave it out.
    """
    from tvm import relax

    @relax.expr_functor.mutator
    class Pairwise(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            binary = _VARIADIC.get(getattr(call.op, "name", ""))
            inputs = self._stacked(call) if binary else None
            if inputs is None:
                return call
            rewritten.append(call)
            out = inputs[0]
            for x in inputs[1:]:
                out = self.builder_.emit(getattr(relax.op, binary)(out, x))
            if call.op.name == "relax.mean":
                out = self.builder_.emit(relax.op.divide(
                    out, relax.const(len(inputs), str(call.ty.dtype))))
            if _static(out) != _static(call):
                out = relax.op.broadcast_to(out, call.ty.shape)  # one input, broadcast
            return out

        def _stacked(self, call):
            """The inputs ``x_i`` when ``call`` reduces axis 0 of ``stack(broadcast_to(x_i,
            s), axis=0)`` of static shape, else None."""
            attrs = call.attrs
            if attrs.keepdims or attrs.axis is None or [int(a) for a in attrs.axis] != [0]:
                return None
            stack = self._bound(call.args[0], "relax.stack")
            if stack is None or int(stack.attrs.axis) != 0:
                return None
            fields = stack.args[0]
            if isinstance(fields, relax.Var):
                fields = self.lookup_binding(fields)
            if not isinstance(fields, relax.Tuple):
                return None
            inputs = []
            for field in fields.fields:
                cast = self._bound(field, "relax.broadcast_to")
                inputs.append(cast.args[0] if cast is not None else field)
            return inputs if all(_static(x) is not None for x in inputs + [call]) else None

        def _bound(self, var, op_name):
            value = self.lookup_binding(var) if isinstance(var, relax.Var) else None
            if isinstance(value, relax.Call) and getattr(value.op, "name", "") == op_name:
                return value
            return None

    def _static(expr):
        """The shape of ``expr`` as ints, or None (unknown rank, symbolic dimension)."""
        shape = getattr(expr.ty, "shape", None)
        values = getattr(shape, "values", None)
        if values is None or not all(hasattr(d, "value") for d in values):
            return None
        return [int(d.value) for d in values]

    rewritten: list = []
    rewriter = Pairwise(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    if not rewritten:  # the module as the converter wrote it, so its tasks stay the same
        return mod
    return relax.transform.DeadCodeElimination()(rewriter.builder_.get())


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
