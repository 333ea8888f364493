"""Model import from PyTorch and ONNX: signatures, numerics, and refusals that name the problem."""
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from tensortune.frontend import (Model, ModelImportError, UnsupportedOperatorError, from_onnx,
                                 from_torch, unsupported_ops)
from tensortune.tasks import build_model
from tensortune.workload import default_target


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    module = Tiny().eval()
    with torch.no_grad():
        module.bn.running_mean.uniform_(-0.5, 0.5)
        module.bn.running_var.uniform_(0.5, 2.0)
    return module


def _default_build_matches_torch(model: Model, module, x: np.ndarray):
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    (got,) = build_model(model, default_target(2)).run(x)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_from_torch_reads_the_signature_and_computes_what_torch_does(tiny):
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype("float32")
    model = from_torch(tiny, (torch.from_numpy(x),))
    assert model.source == "torch" and model.name == "Tiny"
    assert [(t.shape, t.dtype) for t in model.inputs] == [((1, 3, 8, 8), "float32")]
    assert [(t.shape, t.dtype) for t in model.outputs] == [((1, 5), "float32")]
    assert "Tiny (torch)" in model.describe()
    _default_build_matches_torch(model, tiny, x)


def test_from_torch_exports_in_inference_mode_and_restores_training_mode(tiny):
    tiny.train()
    try:
        model = from_torch(tiny, (torch.zeros(1, 3, 8, 8),))
        assert tiny.training
    finally:
        tiny.eval()
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype("float32")
    _default_build_matches_torch(model, tiny, x)  # running statistics, not batch statistics


def test_from_torch_names_the_operators_it_cannot_convert():
    class Special(torch.nn.Module):
        def forward(self, x):
            return torch.lgamma(x) + torch.digamma(x)

    with pytest.raises(UnsupportedOperatorError) as err:
        from_torch(Special(), (torch.rand(3) + 1,))
    assert err.value.ops == ("digamma.default", "lgamma.default")
    assert "lgamma.default" in str(err.value)
    with pytest.raises(TypeError, match="tuple"):
        from_torch(Special(), torch.rand(3))


def test_from_torch_reports_export_failures():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(ModelImportError, match="torch.export failed"):
        from_torch(DataDependent(), (torch.ones(3),))


def _export_onnx(module, path, dynamic_batch=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter announces its deprecation
        torch.onnx.export(module, (torch.zeros(1, 3, 8, 8),), str(path), dynamo=False,
                          input_names=["data"], output_names=["logits"],
                          dynamic_axes={"data": {0: "batch"}} if dynamic_batch else None)


def test_from_onnx_file_matches_torch(tiny, tmp_path):
    path = tmp_path / "tiny.onnx"
    _export_onnx(tiny, path)
    model = from_onnx(path)
    assert model.source == "onnx" and model.name == "tiny"
    assert [(t.name, t.shape) for t in model.inputs] == [("data", (1, 3, 8, 8))]
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype("float32")
    _default_build_matches_torch(model, tiny, x)


def test_from_onnx_needs_shapes_for_symbolic_inputs(tiny, tmp_path):
    path = tmp_path / "dynamic.onnx"
    _export_onnx(tiny, path, dynamic_batch=True)
    with pytest.raises(ModelImportError,
                       match="input 'data' has a symbolic shape \\['batch', 3, 8, 8\\]"):
        from_onnx(path)
    with pytest.raises(ModelImportError, match="unknown input.*'image'.*inputs are \\['data'\\]"):
        from_onnx(path, input_shapes={"image": (1, 3, 8, 8)})
    model = from_onnx(onnx.load(str(path)), input_shapes={"data": (2, 3, 8, 8)})
    assert model.inputs[0].shape == (2, 3, 8, 8) and model.outputs[0].shape == (2, 5)
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype("float32")
    _default_build_matches_torch(model, tiny, x)


def _graph_with(op_type: str, domain: str = ""):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Relu", ["x"], ["h"]),
             helper.make_node(op_type, ["h"], ["y"], domain=domain)]
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=opsets)


def test_from_onnx_names_unsupported_operators_before_converting(tmp_path):
    with pytest.raises(UnsupportedOperatorError) as err:
        from_onnx(_graph_with("MadeUpOp"))
    assert err.value.ops == ("MadeUpOp",) and "MadeUpOp" in str(err.value)
    # a foreign domain's op would be mistaken for the standard op of the same name
    path = tmp_path / "custom.onnx"
    onnx.save(_graph_with("Relu", "com.example"), str(path))
    with pytest.raises(UnsupportedOperatorError, match="com.example::Relu"):
        from_onnx(path)
    assert unsupported_ops(_graph_with("Relu")) == []


def test_from_onnx_reports_unreadable_files(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf")
    with pytest.raises(ModelImportError, match="cannot read ONNX model"):
        from_onnx(bad)


class _ChannelShuffle(torch.nn.Module):
    """ShuffleNet's channel shuffle: the exporter writes its ``view`` as shape arithmetic."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 12, 3, padding=1)
        self.after = torch.nn.Conv2d(12, 6, 1)

    def forward(self, x):
        x = self.conv(x)
        b, c, h, w = x.size()
        x = x.view(b, 3, c // 3, h, w).transpose(1, 2).contiguous().view(b, -1, h, w)
        return self.after(x)


def test_from_onnx_folds_shape_arithmetic_of_static_shapes(tmp_path):
    from tensortune.frontend.onnx_fold import fold_shape_arithmetic

    module = _ChannelShuffle().eval()
    path = tmp_path / "shuffle.onnx"
    _export_onnx(module, path, dynamic_batch=True)  # keeps the Shape -> ... -> Reshape chain
    raw = onnx.load(str(path))
    assert {"Shape", "Gather", "Div"} <= {n.op_type for n in raw.graph.node}
    folded = fold_shape_arithmetic(raw, {"data": [2, 3, 8, 8]})
    assert not {"Shape", "Gather", "Div"} & {n.op_type for n in folded.graph.node}
    assert "Shape" in {n.op_type for n in raw.graph.node}  # the caller's model is untouched
    # imported at a fixed batch, the convolution after the view legalizes
    model = from_onnx(path, input_shapes={"data": (2, 3, 8, 8)})
    x = np.random.default_rng(4).standard_normal((2, 3, 8, 8)).astype("float32")
    _default_build_matches_torch(model, module, x)


class _ChainedViews(torch.nn.Module):
    """Views whose shapes come from tensors that are themselves views: each chain is foldable
    only once the one before it is (a diffusion U-Net's attention then its GEGLU's
    ``chunk``: six rounds of folding)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 12, 3, padding=1)
        self.lin = torch.nn.Linear(12, 24)

    def forward(self, x):
        x = self.conv(x)
        b, c, h, w = x.size()
        y = x.flatten(2).transpose(1, 2)  # [b, hw, c]
        y = y.reshape(b, y.shape[1], 3, c // 3).transpose(2, 3).reshape(b, -1, c)
        a, g = self.lin(y).chunk(2, -1)
        z = (a * torch.nn.functional.gelu(g)).reshape(b, h, w, -1)
        return z.reshape(b, z.shape[1] * z.shape[2], -1).sum(1)


def test_shape_arithmetic_folds_through_chained_views(tmp_path):
    from tvm import relax

    from tensortune.frontend.onnx_fold import fold_shape_arithmetic

    module = _ChainedViews().eval()
    path = tmp_path / "chained.onnx"
    _export_onnx(module, path, dynamic_batch=True)
    folded = fold_shape_arithmetic(onnx.load(str(path)), {"data": [2, 3, 8, 8]})
    assert not {"Shape", "Gather", "Div"} & {n.op_type for n in folded.graph.node}
    model = from_onnx(path, input_shapes={"data": (2, 3, 8, 8)})
    static = [isinstance(b.var.ty.shape, relax.ShapeExpr) for block in
              model.mod["main"].body.blocks for b in block.bindings
              if isinstance(b.var.ty, relax.TensorType)]
    assert static and all(static)  # no dynamic slice or reshape left for legalization
    x = np.random.default_rng(5).standard_normal((2, 3, 8, 8)).astype("float32")
    _default_build_matches_torch(model, module, x)


class NegativeIndices(torch.nn.Module):
    """``x[:, -1]`` (``aten.select.int``), ``x[:, [-1, 0]]`` (``aten.index.Tensor`` of a
    constant) and ``x[..., -2:]`` (a slice): PyTorch counts them from the end."""

    def forward(self, x):
        return torch.cat((x[:, -1], x[..., -2:].flatten(1), x[:, [-1, 0]].flatten(1)), 1)


def test_negative_indices_count_from_the_end_as_in_torch():
    from tvm import relax
    from tvm.ir import GenericConst

    module = NegativeIndices()
    x = np.random.default_rng(0).standard_normal((2, 5, 4)).astype("float32")
    model = from_torch(module, (torch.from_numpy(x),))
    indices = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.take":
            assert isinstance(expr.args[1], GenericConst)
            indices.extend(np.ravel(expr.args[1].value.numpy()).tolist())

    relax.analysis.post_order_visit(model.mod["main"].body, visit)
    assert sorted(indices) == [0, 4, 4]  # TVM's take(mode="fast") would read before x
    _default_build_matches_torch(model, module, x)


class Clipped(torch.nn.Module):
    """ReLU6 and a clip with other bounds between convolutions (MobileNet's pattern)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 24, 3, padding=1)
        self.b = torch.nn.Conv2d(24, 24, 3, padding=1, groups=24)

    def forward(self, x):
        return torch.clamp(self.b(torch.nn.functional.relu6(self.a(x))), -1.0, 2.5)


@pytest.mark.parametrize("opset", [9, 17])  # bounds as attributes (before 11), as inputs after
def test_onnx_clip_follows_the_layout_like_torch(tmp_path, opset):
    """The converter's Clip (TOPI kernels in ``call_tir``) becomes Relax's maximum/minimum, so
    the NHWC model has no transpose but at its input and output, as through torch.export."""
    from tensortune.tasks.extract import prepare

    torch.manual_seed(0)
    module = Clipped().eval()
    path = tmp_path / f"clipped-{opset}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(1, 3, 13, 13),), str(path), dynamo=False,
                          opset_version=opset, input_names=["data"])
    assert any(n.op_type == "Clip" for n in onnx.load(str(path)).graph.node)
    model = from_onnx(path)
    script = model.mod.script()
    assert "cls.maximum" not in script and "cls.minimum" not in script
    assert script.count("R.maximum") == 2 and script.count("R.minimum") == 2
    assert prepare(model.mod).script().count("R.permute_dims") == 2
    x = np.random.default_rng(4).standard_normal((1, 3, 13, 13)).astype("float32")
    _default_build_matches_torch(model, module, x)
