"""Old and unusual CNN graphs through import, every whole-model rewrite, build and run.

Classic architectures exported long ago to ONNX (opset 9, initializers listed as graph inputs,
Concat-heavy blocks, channel shuffles through 5-D tensors, grouped convolutions, ``Sum`` and
``Dropout`` nodes, weights made by ``ConstantOfShape``) crashed in the NHWC conversion with
TVM internal errors. Each kind here must import, go through the rewrites (NHWC with Winograd,
expand-depthwise and fast math lowered to fire on small shapes; and NCHW), build and compute
what ONNX Runtime computes; a rewrite that cannot take part of a graph leaves it, with a
``GraphRewriteWarning``.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tensortune.frontend import from_onnx  # noqa: E402
from tensortune.frontend.onnx_fold import fold_shape_arithmetic, upgrade_old_nodes  # noqa: E402
from tensortune.session import Session  # noqa: E402
from tensortune.settings import Settings  # noqa: E402
from tensortune.tasks.graph import GraphOptions  # noqa: E402
from tensortune.tasks.layout import GraphRewriteWarning  # noqa: E402

F = torch.nn.functional
nn = torch.nn
# every rewrite on: the default thresholds leave 32x32 images and 24-channel layers alone
EVERY = GraphOptions(winograd_channels=8, expand_depthwise_kib=0)


def _shuffle(x, groups):
    b, c, h, w = x.shape
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous().view(b, c, h, w)


class Fire(nn.Module):
    """SqueezeNet: squeeze 1x1, expand 1x1 and 3x3 concatenated, ceil-mode pooling."""

    def __init__(self):
        super().__init__()
        # stride 1: the 3x3 expand then sees 15x15, enough tiles for Winograd to take it
        self.stem, self.squeeze = nn.Conv2d(3, 24, 3), nn.Conv2d(24, 16, 1)
        self.e1, self.e3 = nn.Conv2d(16, 36, 1), nn.Conv2d(16, 36, 3, padding=1)
        self.head = nn.Conv2d(72, 10, 1)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.stem(x)), 3, 2, ceil_mode=True)
        x = F.relu(self.squeeze(x))
        x = torch.cat([F.relu(self.e1(x)), F.relu(self.e3(x))], 1)
        return torch.flatten(F.adaptive_avg_pool2d(F.relu(self.head(x)), 1), 1)


class ShuffleV1(nn.Module):
    """ShuffleNet v1 unit: grouped 1x1 convolutions, a channel shuffle, a depthwise 3x3."""

    def __init__(self, groups=3):
        super().__init__()
        self.groups = groups
        self.stem, self.bn0 = nn.Conv2d(3, 24, 3, padding=1, bias=False), nn.BatchNorm2d(24)
        self.g1, self.bn1 = nn.Conv2d(24, 72, 1, groups=groups, bias=False), nn.BatchNorm2d(72)
        self.dw = nn.Conv2d(72, 72, 3, padding=1, groups=72, bias=False)
        self.bn2 = nn.BatchNorm2d(72)
        self.g2, self.bn3 = nn.Conv2d(72, 24, 1, groups=groups, bias=False), nn.BatchNorm2d(24)

    def forward(self, x):
        x = F.relu(self.bn0(self.stem(x)))
        y = _shuffle(F.relu(self.bn1(self.g1(x))), self.groups)
        return F.relu(x + self.bn3(self.g2(self.bn2(self.dw(y)))))


class ShuffleV2(nn.Module):
    """ShuffleNet v2 unit: a channel split, 1x1 then depthwise, concat and shuffle."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 48, 3, padding=1)
        self.c1, self.c2 = nn.Conv2d(24, 72, 1), nn.Conv2d(72, 24, 1)
        self.dw = nn.Conv2d(72, 72, 3, padding=1, groups=72)

    def forward(self, x):
        a, b = F.relu(self.stem(x)).chunk(2, dim=1)
        b = F.relu(self.c2(self.dw(F.relu(self.c1(b)))))
        return _shuffle(torch.cat([a, b], 1), 2)


class ResNeXt(nn.Module):
    """ResNeXt bottleneck: a grouped 3x3 (8 groups), a residual."""

    def __init__(self):
        super().__init__()
        self.stem, self.bn0 = nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32)
        self.c1, self.bn1 = nn.Conv2d(32, 64, 1, bias=False), nn.BatchNorm2d(64)
        self.c2 = nn.Conv2d(64, 64, 3, padding=1, groups=8, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.c3, self.bn3 = nn.Conv2d(64, 32, 1, bias=False), nn.BatchNorm2d(32)

    def forward(self, x):
        x = F.relu(self.bn0(self.stem(x)))
        y = F.relu(self.bn2(self.c2(F.relu(self.bn1(self.c1(x))))))
        return F.relu(x + self.bn3(self.c3(y)))


class Dense(nn.Module):
    """DenseNet: batch-norm and ReLU before each convolution, every output concatenated."""

    def __init__(self, growth=12):
        super().__init__()
        self.stem, self.layers, c = nn.Conv2d(3, 24, 3, padding=1), nn.ModuleList(), 24
        for _ in range(2):
            self.layers.append(nn.Sequential(
                nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, 48, 1, bias=False), nn.BatchNorm2d(48),
                nn.ReLU(), nn.Conv2d(48, growth, 3, padding=1, bias=False)))
            c += growth
        self.transition = nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, 40, 1),
                                        nn.AvgPool2d(2))

    def forward(self, x):
        x = self.stem(x)
        for layer in self.layers:
            x = torch.cat([x, layer(x)], 1)
        return self.transition(x)


class Inception(nn.Module):
    """GoogLeNet: four parallel branches (1x1, 3x3, 5x5, pooling) concatenated."""

    def __init__(self):
        super().__init__()
        self.stem, self.b1 = nn.Conv2d(3, 32, 3, padding=1), nn.Conv2d(32, 16, 1)
        self.b3 = nn.Sequential(nn.Conv2d(32, 24, 1), nn.ReLU(), nn.Conv2d(24, 32, 3, padding=1))
        self.b5 = nn.Sequential(nn.Conv2d(32, 8, 1), nn.ReLU(), nn.Conv2d(8, 16, 5, padding=2))
        self.pool = nn.Sequential(nn.MaxPool2d(3, 1, padding=1), nn.Conv2d(32, 16, 1))
        self.fc = nn.Linear(80, 10)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = torch.cat([F.relu(b(x)) for b in (self.b1, self.b3, self.b5, self.pool)], 1)
        return self.fc(F.avg_pool2d(x, x.shape[-1]).view(x.size(0), -1))


class FiveD(nn.Module):
    """A channel shuffle whose 5-D tensor is reduced, softmaxed and concatenated on."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 24, 3, padding=1), nn.Conv2d(48, 24, 3, padding=1)

    def forward(self, x):
        y = F.relu(self.c1(x))
        b, c, h, w = y.shape
        z = y.view(b, 3, 8, h, w)
        z = torch.softmax(z - z.mean(2, keepdim=True), 1)
        z2 = torch.cat([z, z * 2], 2).transpose(1, 2).reshape(b, 48, h, w)
        return self.c2(z2), z.sum([3, 4])


class SplitConcat(nn.Module):
    """A split into three outputs concatenated in another order, then halves swapped."""

    def __init__(self):
        super().__init__()
        self.stem, self.out = nn.Conv2d(3, 48, 3, padding=1), nn.Conv2d(48, 24, 1)
        self.a, self.b = nn.Conv2d(16, 16, 3, padding=1), nn.Conv2d(16, 16, 1)

    def forward(self, x):
        p, q, r = torch.split(F.relu(self.stem(x)), 16, dim=1)
        y1, y2 = torch.chunk(torch.cat([F.relu(self.a(p)), self.b(q), r], 1), 2, dim=1)
        return self.out(torch.cat([y2, y1], 1))


class FPNNeck(nn.Module):
    """A detection neck at opset 11: a 4x4 stride-2 transposed convolution, a bilinear resize
    to a size (exported with an empty ``scales`` beside ``sizes``), a nearest resize by a
    factor, lateral 1x1 convolutions added to them, a concatenation."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 24, 3, 2, 1), nn.Conv2d(24, 40, 3, 2, 1)
        self.lat1, self.lat2 = nn.Conv2d(24, 16, 1), nn.Conv2d(40, 16, 1)
        self.up = nn.ConvTranspose2d(16, 16, 4, 2, 1)
        self.out = nn.Conv2d(48, 8, 3, padding=1)

    def forward(self, x):
        a = F.leaky_relu(self.c1(x), 0.1)
        b = F.leaky_relu(self.c2(a), 0.1)
        p2 = self.lat2(b)
        p1 = self.lat1(a) + self.up(p2)
        q1 = F.interpolate(p2, size=a.shape[-2:], mode="bilinear", align_corners=False)
        q2 = F.interpolate(p2, scale_factor=2.0, mode="nearest")
        return self.out(torch.cat([p1, q1, q2], 1))


class MobileViTBlock(nn.Module):
    """MobileViT: a feature map unfolded into 2x2 patches of tokens, a transformer layer over
    them (PyTorch's exporter reshapes by shapes cut at ``dim % rank``: a ``Mod``), folded back
    and concatenated with its input."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 24, 3, 2, 1)
        self.local = nn.Conv2d(24, 32, 1)
        self.tf = nn.TransformerEncoderLayer(32, 4, 64, 0.0, batch_first=True)
        self.fuse = nn.Conv2d(56, 24, 3, padding=1)

    def forward(self, x):
        x = F.silu(self.stem(x))
        y = self.local(x)
        b, d, h, w = y.shape
        t = y.reshape(b, d, h // 2, 2, w // 2, 2).permute(0, 3, 5, 2, 4, 1)
        t = self.tf(t.reshape(b * 4, (h // 2) * (w // 2), d))
        y = t.reshape(b, 2, 2, h // 2, w // 2, d).permute(0, 5, 3, 1, 4, 2).reshape(b, d, h, w)
        return self.fuse(torch.cat([x, y], 1))


TORCH = {"fire": (Fire, 9), "shufflenet_v1": (ShuffleV1, 9), "shufflenet_v2": (ShuffleV2, 11),
         "resnext": (ResNeXt, 13), "densenet": (Dense, 9), "inception": (Inception, 11),
         "shuffle_5d": (FiveD, 9), "split_concat": (SplitConcat, 13),
         "fpn_neck": (FPNNeck, 11), "mobilevit": (MobileViTBlock, 14)}


def _weight(name, shape, rng, scale=0.2):
    return numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)


def _helper_model(nodes, initializers, out_shape):
    """An opset-9 model on a 1x3x32x32 ``data``, its initializers also listed as inputs."""
    inputs = [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 32, 32])]
    inputs += [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims))
               for t in initializers]
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape)
    graph = helper.make_graph(nodes, "old", inputs, [out], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 4
    return model


def old_forms():
    """What exporters of 2018 wrote: ``Sum``/``Max``/``Mean``/``Min`` (stacked by the converter),
    ``Dropout`` with its mask, a one-output ``Split``, attribute ``Slice``, ``Upsample``-9."""
    rng = np.random.default_rng(0)
    node = helper.make_node
    nodes = [
        node("Conv", ["data", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        node("Relu", ["c1"], ["r1"]),
        node("Dropout", ["r1"], ["d1", "mask"], ratio=0.5),
        node("Conv", ["d1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        node("Sum", ["c2", "r1"], ["s"]),
        node("Conv", ["s", "w3"], ["c3"]),
        node("Max", ["c3", "s"], ["m"]),
        node("Mean", ["m", "c2", "r1"], ["mn"]),
        node("Min", ["mn", "b3"], ["mi"]),
        node("Split", ["mi"], ["one"], axis=1),
        node("Slice", ["one"], ["sl"], starts=[0, 1], ends=[16, 31], axes=[1, 2]),
        node("Constant", [], ["scales"], value=numpy_helper.from_array(
            np.array([1, 1, 2, 2], np.float32), "scales")),
        node("Upsample", ["sl", "scales"], ["up"], mode="nearest"),
        node("Conv", ["up", "w4"], ["out"], strides=[2, 2]),
    ]
    weights = [_weight("w1", (24, 3, 3, 3), rng), _weight("b1", (24,), rng),
               _weight("w2", (24, 24, 3, 3), rng, 0.1), _weight("w3", (24, 24, 1, 1), rng),
               _weight("b3", (24, 1, 1), rng), _weight("w4", (20, 16, 1, 1), rng)]
    return _helper_model(nodes, weights, [1, 20, 30, 32])


def constant_of_shape():
    """Weights made in the graph: ``ConstantOfShape`` fills, one plus a constant, then BN."""
    rng = np.random.default_rng(1)
    node = helper.make_node

    def const(name, value):
        return node("Constant", [], [name], value=numpy_helper.from_array(value, name))

    def fill(name, shape, value):
        return [const(f"{name}_shape", np.array(shape, np.int64)),
                node("ConstantOfShape", [f"{name}_shape"], [name],
                     value=numpy_helper.from_array(np.array([value], np.float32)))]

    nodes = [*fill("w0", [24, 3, 3, 3], 0.05),
             const("noise", rng.normal(0, 0.1, (24, 3, 3, 3)).astype(np.float32)),
             node("Add", ["w0", "noise"], ["w"]),
             node("Conv", ["data", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             *fill("mean", [24], 0.0), *fill("var", [24], 1.0), *fill("gamma", [24], 1.5),
             node("BatchNormalization", ["c", "gamma", "b", "mean", "var"], ["bn"]),
             node("Relu", ["bn"], ["r"]),
             *fill("w2", [72, 24, 1, 1], 0.02),
             node("Conv", ["r", "w2"], ["out"])]
    return _helper_model(nodes, [_weight("b", (24,), rng)], [1, 72, 32, 32])


HELPER = {"old_forms": old_forms, "constant_of_shape": constant_of_shape}
KINDS = sorted(TORCH) + sorted(HELPER)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``kind -> (path, input, ONNX Runtime's outputs)``, exported once."""
    folder = tmp_path_factory.mktemp("onnx")
    x = np.random.default_rng(7).standard_normal((1, 3, 32, 32)).astype(np.float32)
    out = {}
    for kind in KINDS:
        path = folder / f"{kind}.onnx"
        if kind in TORCH:
            cls, opset = TORCH[kind]
            torch.manual_seed(0)
            module = cls().eval()
            for m in module.modules():  # statistics that make batch-norm folding matter
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
            with warnings.catch_warnings():  # the TorchScript exporter's deprecation
                warnings.simplefilter("ignore", DeprecationWarning)
                torch.onnx.export(module, (torch.from_numpy(x),), str(path),
                                  opset_version=opset, dynamo=False, input_names=["data"],
                                  keep_initializers_as_inputs=opset < 13)
        else:
            onnx.save(HELPER[kind](), str(path))
        options = ort.SessionOptions()
        options.log_severity_level = 3  # initializers as inputs: a warning each
        ref = ort.InferenceSession(str(path), options).run(None, {"data": x})
        out[kind] = (path, x, ref)
    return out


def _assert_matches(outputs, expected):
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def _session(path, graph, tmp_path):
    return Session.from_onnx(path, settings=Settings(home=tmp_path / "home"), graph=graph)


@pytest.mark.parametrize("graph", [EVERY, "nchw"], ids=["nhwc-every-rewrite", "nchw"])
@pytest.mark.parametrize("kind", KINDS)
def test_graph_imports_rewrites_builds_and_matches_onnxruntime(kind, graph, exported, tmp_path):
    path, x, expected = exported[kind]
    with warnings.catch_warnings():
        # the precise fixes leave nothing for the safety net: it must stay silent here
        warnings.simplefilter("error", GraphRewriteWarning)
        session = _session(path, graph, tmp_path)
        assert [t.name for t in session.model.inputs] == ["data"]  # weights are not inputs
        # where the models crashed; NCHW's is the model's own graph, built below
        tasks = session.extract() if graph is EVERY else []
        session.build(tuned=False)
    _assert_matches(session.run(x), expected)
    names = " ".join(t.name for t in tasks)
    if graph is EVERY and kind in ("fire", "densenet", "inception", "split_concat"):
        assert "winograd" in names  # the rewrite fired, not merely passed over
    if graph is EVERY and kind == "shufflenet_v2":  # (v1's 1x1 before its depthwise is grouped)
        assert "expand_depthwise" in names
    if graph is EVERY and kind == "fpn_neck":
        # the transposed convolution is an ordinary one (tasks.transposed), and the lateral
        # sum with its bias beside the epilogue still takes the convolution template
        assert "conv2d_transpose" not in names
        assert all(t.tunable for t in tasks if "conv2d" in t.name), \
            [t.describe() for t in tasks if not t.tunable]


def test_hardware_free_tuning_of_a_split_concat_model_matches_onnxruntime(exported, tmp_path):
    path, x, expected = exported["split_concat"]
    session = Session.from_onnx(path, settings=Settings(home=tmp_path / "home"))
    summary = session.tune_hardware_free(effort="fast")
    assert summary["compiled"] > 0
    session.build()
    _assert_matches(session.run(x), expected)


def test_old_forms_are_upgraded_before_the_converter_sees_them(exported):
    raw = onnx.load(str(exported["old_forms"][0]))
    folded = fold_shape_arithmetic(raw, {"data": [1, 3, 32, 32]})
    upgraded, names = upgrade_old_nodes(folded)
    ops = [n.op_type for n in upgraded.graph.node]
    assert "Upsample" not in ops and "Resize" in ops and "Dropout" not in ops
    assert ops.count("Identity") == 2 and len(names) == 4  # Dropout, the one-output Split
    slice_node = next(n for n in upgraded.graph.node if n.op_type == "Slice")
    assert len(slice_node.input) == 4 and not slice_node.attribute
    assert upgrade_old_nodes(upgraded)[1] == []  # nothing left to upgrade
    assert "Dropout" in [n.op_type for n in raw.graph.node]  # the caller's model is untouched
    # the variadic operators are pairwise, not a stack the NHWC conversion cannot take
    text = from_onnx(exported["old_forms"][0]).mod["main"].script()
    assert "R.stack" not in text and "R.maximum" in text and "R.minimum" in text


def test_constant_of_shape_weights_are_constants(exported):
    raw = onnx.load(str(exported["constant_of_shape"][0]))
    folded = fold_shape_arithmetic(raw, {"data": [1, 3, 32, 32]})
    assert "ConstantOfShape" not in {n.op_type for n in folded.graph.node}
    # bound as constants (weights the convolution's function does not take as inputs), not
    # filled by an ``R.full`` every run
    assert "R.full" not in from_onnx(exported["constant_of_shape"][0]).mod["main"].script()


def _stacked_model():
    """Relax ``conv -> stack -> sum -> conv``: TVM's layout rule for ``stack`` names its new
    axis "S", a layout no later operator can read (the ONNX import computes its own variadic
    operators pairwise, so only a Relax module shows it)."""
    from tvm import relax

    from tensortune.frontend import Model

    rng = np.random.default_rng(3)
    w1, w2 = (relax.const(rng.normal(0, 0.2, s).astype("float32")) for s in ((24, 3, 3, 3),
                                                                              (24, 24, 3, 3)))
    bb = relax.BlockBuilder()
    x = relax.Var("data", relax.TensorType((1, 3, 16, 16), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(x, w1, padding=1))))
            y2 = bb.emit(relax.op.multiply(y, relax.const(2.0, "float32")))
            total = bb.emit(relax.op.sum(bb.emit(relax.op.stack([y, y2], axis=0)), axis=[0]))
            out = bb.emit_output(relax.op.nn.conv2d(total, w2, padding=1))
        bb.emit_func_output(out)
    return Model.from_ir(bb.get(), "onnx", "stacked")


@pytest.mark.parametrize("search", [False, True], ids=["known-rule", "searched"])
def test_an_operator_the_layout_cannot_take_stays_nchw_with_a_warning(search, monkeypatch):
    from tensortune.tasks import build_model, layout
    from tensortune.tasks.extract import prepare
    from tensortune.workload import default_target

    if search:  # the safety net must find the operator itself
        monkeypatch.setattr(layout, "_broken_rule", lambda call: False)
    model, target = _stacked_model(), default_target(2)
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype("float32")
    with pytest.warns(GraphRewriteWarning, match=r"NHWC layout conversion .*relax\.stack \(x1\)"):
        text = prepare(model.mod, EVERY)["main"].script()
        nhwc = build_model(model, target, graph=EVERY).run(x)
    assert 'data_layout="NHWC"' in text and "winograd" in text  # the rest still converted
    _assert_matches(nhwc, build_model(model, target, graph="nchw").run(x))


def test_a_rewrite_that_raises_is_skipped_with_a_warning(exported, monkeypatch, tmp_path):
    import tvm

    from tensortune.tasks import winograd

    def broken(**_kwargs):
        @tvm.transform.module_pass(opt_level=0, name="Broken")
        def apply(_mod, _ctx):
            raise tvm.error.InternalError("Check failed: deliberately\nsecond line")

        return apply

    monkeypatch.setattr(winograd, "winograd_pass", broken)
    path, x, expected = exported["fire"]
    with pytest.warns(GraphRewriteWarning, match=r"Winograd skipped.*deliberately"):
        session = _session(path, EVERY, tmp_path)
        tasks = session.extract()
        session.build(tuned=False)
    assert not any("winograd" in t.name for t in tasks)
    _assert_matches(session.run(x), expected)


def test_one_convolution_a_rewrite_cannot_take_stays_as_it_was(exported, monkeypatch,
                                                               tmp_path):
    from tensortune.tasks import winograd

    def refuse(*_args):
        raise ValueError("no transform for this one")

    monkeypatch.setattr(winograd, "_input_transform", refuse)
    path, x, expected = exported["fire"]
    with pytest.warns(GraphRewriteWarning,
                      match=r"Winograd left 1 operator\(s\) as they were: relax.nn.conv2d 3x3") \
            as caught:
        session = _session(path, EVERY, tmp_path)
        tasks = session.extract()
        session.build(tuned=False)
    assert not any("winograd" in t.name for t in tasks)  # nothing half-rewritten is left
    # the pass itself went on (a failure after the refusal skipped it for the whole model)
    assert not [str(w.message) for w in caught if "skipped" in str(w.message)]
    _assert_matches(session.run(x), expected)


def test_when_no_operator_explains_the_failure_the_model_stays_nchw(exported, monkeypatch,
                                                                    tmp_path):
    from tensortune.tasks import layout

    monkeypatch.setattr(layout, "_convert", lambda mod, skipped: (None, RuntimeError("no")))
    path, x, expected = exported["split_concat"]
    with pytest.warns(GraphRewriteWarning, match="NHWC layout conversion skipped"):
        session = _session(path, EVERY, tmp_path)
        session.build(tuned=False)
    _assert_matches(session.run(x), expected)
