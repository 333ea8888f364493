"""Folding an ONNX graph's shape arithmetic into constants before import.

PyTorch's TorchScript exporter writes ``x.view(b, g, c // g, h, w)`` (ShuffleNet's channel
shuffle, every ``flatten``-by-hand) as ``Shape -> Gather -> Div -> Concat -> Reshape``. The
Relax importer keeps such a chain as tensor arithmetic, so the ``Reshape`` gets a shape it
cannot see and the convolution after it fails to legalize ("emit_te now only supports Tensor
that has ShapeExpr shape"). With static input shapes every value in the chain is known:
this evaluates the chain with ONNX's reference evaluator and puts constants in its place.
Only small integer tensors computed from shapes and constants are folded, never weights.
"""
from __future__ import annotations

import numpy as np

# operators the chains are made of; each is evaluated only on constant inputs
FOLDABLE = frozenset({"Shape", "Gather", "Div", "Mul", "Add", "Sub", "Concat", "Unsqueeze",
                      "Squeeze", "Slice", "Cast", "Floor", "Ceil", "Range", "Equal", "Where",
                      "ConstantOfShape", "Reshape", "Size", "Identity", "Max", "Min"})
MAX_ELEMENTS = 64  # a shape, not a tensor of data


def fold_shape_arithmetic(model, input_shapes: dict[str, list[int]]):
    """A copy of ``model`` whose shape computations on static shapes are constants; the
    number of nodes folded is ``len(model.graph.node) - len(result.graph.node)`` plus the
    ``Constant`` nodes added."""
    import onnx
    from onnx import helper, numpy_helper, shape_inference
    from onnx.reference import ReferenceEvaluator

    model = onnx.ModelProto.FromString(model.SerializeToString())
    for inp in model.graph.input:  # the shapes the model will be imported with
        if inp.name in input_shapes:
            dims = inp.type.tensor_type.shape.dim
            for d, size in zip(dims, input_shapes[inp.name]):
                d.ClearField("dim_param")
                d.dim_value = int(size)
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # an unusual model: import it as it is
        return model
    shapes = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input):
        dims = vi.type.tensor_type.shape.dim
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape") and \
                all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = [d.dim_value for d in dims]
    known = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
             if int(np.prod(t.dims)) <= MAX_ELEMENTS}
    kept, changed = [], False
    for node in model.graph.node:
        value = None
        if node.op_type == "Constant" and len(node.output) == 1:
            try:
                value = numpy_helper.to_array(node.attribute[0].t) if \
                    node.attribute[0].name == "value" else None
            except Exception:
                value = None
            if value is not None and value.size <= MAX_ELEMENTS:
                known[node.output[0]] = value
            kept.append(node)
            continue
        if node.op_type == "Shape" and node.input[0] in shapes and not node.attribute:
            value = np.array(shapes[node.input[0]], dtype=np.int64)
        elif node.op_type in FOLDABLE and node.op_type != "Shape" and node.input and \
                len(node.output) == 1 and all(i in known for i in node.input if i):
            value = _evaluate(node, known, helper, ReferenceEvaluator, model.opset_import)
        if value is None or value.size > MAX_ELEMENTS:
            kept.append(node)
            continue
        known[node.output[0]] = value
        kept.append(helper.make_node("Constant", [], [node.output[0]],
                                     value=numpy_helper.from_array(value, node.output[0])))
        changed = True
    if changed:
        del model.graph.node[:]
        model.graph.node.extend(kept)
    return model


def _evaluate(node, known, helper, ReferenceEvaluator, opsets):
    """The output of ``node`` on its constant inputs, or None if the evaluator refuses it."""
    from onnx import numpy_helper

    inputs = [i for i in node.input if i]
    try:
        graph = helper.make_graph(
            [node], "fold",
            [helper.make_tensor_value_info(
                i, helper.np_dtype_to_tensor_dtype(known[i].dtype), list(known[i].shape))
             for i in inputs],
            [helper.make_tensor_value_info(node.output[0], 0, None)])
        result = ReferenceEvaluator(helper.make_model(graph, opset_imports=list(opsets))).run(
            None, {i: known[i] for i in inputs})[0]
        return np.asarray(numpy_helper.to_array(numpy_helper.from_array(np.asarray(result))))
    except Exception:  # leave it to the importer
        return None
