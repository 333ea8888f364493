"""Folding an ONNX graph's shape arithmetic into constants before import.

PyTorch's TorchScript exporter writes ``x.view(b, g, c // g, h, w)`` (ShuffleNet's channel
shuffle, every ``flatten``-by-hand) as ``Shape -> Gather -> Div -> Concat -> Reshape``. The
Relax importer keeps such a chain as tensor arithmetic, so the ``Reshape`` gets a shape it
cannot see and the convolution after it fails to legalize ("emit_te now only supports Tensor
that has ShapeExpr shape"). With static input shapes every value in the chain is known:
this evaluates the chain with ONNX's reference evaluator and puts constants in its place.
Only small tensors computed from shapes and constants are folded, and the fills of
``ConstantOfShape`` (old exporters made zero or one weights and batch-norm statistics that way):
as constants they are weights the importer binds, which batch-norm folding and the weight
layouts need.

``upgrade_old_nodes`` then rewrites the opset-9 forms that TVM's converter reads wrongly.
"""
from __future__ import annotations

import numpy as np

# operators the chains are made of; each is evaluated only on constant inputs
FOLDABLE = frozenset({"Shape", "Gather", "Div", "Mul", "Add", "Sub", "Concat", "Unsqueeze",
                      "Squeeze", "Slice", "Cast", "Floor", "Ceil", "Range", "Equal", "Where",
                      "ConstantOfShape", "Reshape", "Size", "Identity", "Max", "Min",
                      # PyTorch's multi-head attention reshapes by a shape cut at index
                      # ``dim % rank`` (nn.TransformerEncoderLayer on a 3-D input, exported)
                      "Mod", "Neg", "Abs", "Less", "Greater", "Not", "And", "Or"})
MAX_ELEMENTS = 64  # a shape, not a tensor of data
MAX_FILL = 1 << 24  # a ConstantOfShape folded up to 64 MB of float32
MAX_PASSES = 32  # rounds of shape inference and folding (a diffusion block needed 6)


def fold_shape_arithmetic(model, input_shapes: dict[str, list[int]]):
    """A copy of ``model`` whose shape computations on static shapes are constants; the
    number of nodes folded is ``len(model.graph.node) - len(result.graph.node)`` plus the
    ``Constant`` nodes added."""
    import onnx

    model = onnx.ModelProto.FromString(model.SerializeToString())
    for inp in model.graph.input:  # the shapes the model will be imported with
        if inp.name in input_shapes:
            dims = inp.type.tensor_type.shape.dim
            for d, size in zip(dims, input_shapes[inp.name]):
                d.ClearField("dim_param")
                d.dim_value = int(size)
    # a chain folded makes the shapes after it known (a reshape by a folded shape), and so
    # the next chain foldable: ``torch.chunk`` after an attention's reshapes, a diffusion
    # U-Net's GEGLU
    for _ in range(MAX_PASSES):
        model, changed = _fold_once(model)
        if not changed:
            break
    return model


def _fold_once(model):
    """``(model, changed)``: one pass of shape inference and folding (``model`` changed in
    place)."""
    from onnx import helper, numpy_helper, shape_inference
    from onnx.reference import ReferenceEvaluator

    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # an unusual model: import it as it is
        return model, False
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
            if node.op_type != "ConstantOfShape" or np.prod(known[node.input[0]]) <= MAX_FILL:
                value = _evaluate(node, known, helper, ReferenceEvaluator, model.opset_import)
        fill = node.op_type == "ConstantOfShape" and value is not None
        if value is None or (value.size > MAX_ELEMENTS and not fill):
            kept.append(node)
            continue
        if value.size <= MAX_ELEMENTS:  # a weight-sized fill is a constant, not shape data
            known[node.output[0]] = value
        kept.append(helper.make_node("Constant", [], [node.output[0]],
                                     value=numpy_helper.from_array(value, node.output[0])))
        changed = True
    if changed:
        del model.graph.node[:]
        model.graph.node.extend(kept)
    return model, changed


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


def upgrade_old_nodes(model):
    """``(model, names)``: ``model`` (a copy when anything changes) with the old operator forms
    that TVM 0.27's converter misreads rewritten, each to what it computes at inference, and
    the names of the nodes rewritten:

    - ``Dropout`` whose mask nothing reads (and not in training mode): an ``Identity``; as a
      Relax ``dropout`` its (output, mask) tuple breaks the NHWC layout conversion;
    - ``Split`` into a single output: an ``Identity`` (Relax's then returns no tuple, which the
      layout conversion expects);
    - ``Slice`` before opset 10 (starts, ends, axes as attributes): the converter reads them as
      inputs, so they become constant inputs;
    - ``Upsample`` (scales an attribute or a constant input): the converter reads only the
      attribute and rounds nearest neighbours where Upsample floors, so it becomes the
      ``Resize`` that computes the same (asymmetric coordinates, floor);
    - ``Resize`` with output sizes and an empty tensor for scales (PyTorch's export at opsets
      11-12): the converter takes the empty scales as given and refuses both, so they go.

    Some are later forms under the model's old opset, which the converter's ``check_model``
    reports: ``onnx_import`` silences that for these nodes.
    """
    import onnx
    from onnx import helper, numpy_helper

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    consts = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            consts[node.output[0]] = node.attribute[0].t
    read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    nodes, names = [], []
    for node in model.graph.node:
        new, label = None, node.name or f"{node.output[0]}__tensortune"  # old nodes: unnamed
        if node.domain not in ("", "ai.onnx"):
            pass
        elif node.op_type == "Dropout" and not (len(node.output) > 1 and node.output[1] in read) \
                and _inference(node, consts, numpy_helper):
            new = [helper.make_node("Identity", node.input[:1], node.output[:1], name=label)]
        elif node.op_type == "Split" and len(node.output) == 1:
            new = [helper.make_node("Identity", node.input[:1], node.output, name=label)]
        elif node.op_type == "Slice" and opset < 10 and _attr(node, "starts") is not None:
            starts, ends = _attr(node, "starts"), _attr(node, "ends")
            axes = _attr(node, "axes") or list(range(len(starts)))
            new, inputs = [], [node.input[0]]
            for what, values in (("starts", starts), ("ends", ends), ("axes", axes)):
                name = f"{node.output[0]}__tensortune_{what}"
                new.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
                    np.asarray(values, np.int64), name)))
                inputs.append(name)
            new.append(helper.make_node("Slice", inputs, node.output, name=label))
        elif node.op_type == "Upsample" and _scales(node, consts, numpy_helper) is not None:
            name = f"{node.output[0]}__tensortune_scales"
            scales = np.asarray(_scales(node, consts, numpy_helper), np.float32)
            mode = _attr(node, "mode") or b"nearest"
            new = [helper.make_node("Constant", [], [name],
                                    value=numpy_helper.from_array(scales, name)),
                   helper.make_node("Resize", [node.input[0], "", name], node.output,
                                    name=label, mode=mode, nearest_mode="floor",
                                    coordinate_transformation_mode="asymmetric")]
        elif node.op_type == "Resize" and len(node.input) == 4 and node.input[3] \
                and node.input[2] in consts and not numpy_helper.to_array(
                    consts[node.input[2]]).size:
            new = [helper.make_node("Resize", [node.input[0], node.input[1], "", node.input[3]],
                                    node.output, name=label, **{
                                        a.name: helper.get_attribute_value(a)
                                        for a in node.attribute})]
        if new is None:
            nodes.append(node)
        else:
            nodes.extend(new)
            names.append(label)
    if not names:
        return model, names
    upgraded = onnx.ModelProto()
    upgraded.CopyFrom(model)
    del upgraded.graph.node[:]
    upgraded.graph.node.extend(nodes)
    return upgraded, names


def _scales(upsample, consts, numpy_helper):
    """An ``Upsample``'s scales: its attribute (opset 7) or its constant input (opset 9)."""
    if len(upsample.input) == 2:
        known = consts.get(upsample.input[1])
        return None if known is None else numpy_helper.to_array(known).tolist()
    return _attr(upsample, "scales")


def _attr(node, name):
    from onnx import helper

    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), None)


def _inference(dropout, consts, numpy_helper) -> bool:
    """Whether a ``Dropout`` passes its input through: no ``training_mode`` input (opset 12),
    or a constant false one."""
    if len(dropout.input) < 3 or not dropout.input[2]:
        return True
    mode = consts.get(dropout.input[2])
    return mode is not None and not bool(numpy_helper.to_array(mode))
