"""ONNX's LSTM, GRU and RNN: unrolled over a static sequence (``frontend.onnx_rnn``) and fused
into one function per layer (``frontend.onnx_recurrence``). Both give ONNX's outputs for each
direction, layout and option; the fused function's template computes the same for every seed
and sampled config on irregular shapes; a PyTorch model is imported and built to match, its
layers fused and tunable; refusals name what cannot be unrolled."""
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tensortune.frontend import ModelImportError, UnsupportedOperatorError, from_onnx
from tensortune.frontend.onnx_fold import fold_shape_arithmetic
from tensortune.frontend.onnx_rnn import RECURRENT, unroll_recurrent
from tensortune.frontend.recurrence_tir import Recurrence, recurrence_func

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _node_model(kind, attrs, layout=0, initial=False, peepholes=False, opset=14,
                steps=7, batch=2, inputs=5, hidden=6, seed=0):
    """One recurrent node with random weights; ``(model, feeds)``."""
    rng = np.random.default_rng(seed)
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    g = GATES[kind]
    weights = {"W": (dirs, g * hidden, inputs), "R": (dirs, g * hidden, hidden),
               "B": (dirs, 2 * g * hidden)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.4).astype(np.float32), n)
             for n, s in weights.items()]
    x_shape = [steps, batch, inputs] if layout == 0 else [batch, steps, inputs]
    h_shape = [dirs, batch, hidden] if layout == 0 else [batch, dirs, hidden]
    names = ["X", "W", "R", "B", ""]
    feeds = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    if initial:
        for name in ["h0", "c0"][:2 if kind == "LSTM" else 1]:
            names.append(name)
            feeds[name] = rng.standard_normal(h_shape).astype(np.float32)
    if peepholes:
        names += [""] * (7 - len(names)) + ["P"]
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((dirs, 3 * hidden)) * 0.4).astype(np.float32), "P"))
    outputs = ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else [])
    if opset >= 14:
        attrs = {**attrs, "layout": layout}
    node = helper.make_node(kind, names, outputs, hidden_size=hidden, **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape))
                      for n, v in feeds.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), feeds


CASES = {
    "lstm-bidirectional-peepholes-opset18": ("LSTM", {"direction": "bidirectional"}, 0, True,
                                             True, 18),
    "lstm-reverse-batch-first": ("LSTM", {"direction": "reverse"}, 1, True, False, 14),
    "lstm-opset9": ("LSTM", {}, 0, False, False, 9),
    "gru-reset-after-batch-first": ("GRU", {"linear_before_reset": 0,
                                            "direction": "bidirectional"}, 1, True, False, 14),
    "gru-reset-before-opset11": ("GRU", {"linear_before_reset": 1}, 0, False, False, 11),
    "rnn-relu-reverse": ("RNN", {"direction": "reverse", "activations": ["Relu"]}, 0, True,
                         False, 14),
}


def _reference(model, feeds, layout):
    """ONNX Runtime's outputs; ONNX's reference evaluator's where ONNX Runtime refuses the
    batch-first layout (the evaluator knows no ``Relu`` activation)."""
    if layout == 1:
        return ReferenceEvaluator(model).run(None, feeds)
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("case", sorted(CASES))
def test_unrolled_node_computes_what_onnx_defines(case):
    model, feeds = _node_model(*CASES[case])
    unrolled = unroll_recurrent(fold_shape_arithmetic(model, {k: list(v.shape)
                                                              for k, v in feeds.items()}))
    assert not RECURRENT & {n.op_type for n in unrolled.graph.node}
    # only operators of one form in every opset (and Split in its opset's), so it imports
    # under the model's own
    assert {n.op_type for n in unrolled.graph.node} <= {
        "MatMul", "Add", "Sub", "Mul", "Split", "Reshape", "Concat", "Transpose", "Identity",
        "Sigmoid", "Tanh", "Relu"}
    onnx.shape_inference.infer_shapes(unrolled, strict_mode=True)  # each node valid in its opset
    # the weights once per direction, not once per step
    size = lambda m: sum(int(np.prod(t.dims)) for t in m.graph.initializer)  # noqa: E731
    assert size(unrolled) <= 3 * size(model) + 200
    expected = _reference(model, feeds, layout=CASES[case][2])
    for want, got in zip(expected, ReferenceEvaluator(unrolled).run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# every case but GRU's reset-after form (two products per step) is one fused function
FUSED = {"lstm-bidirectional-peepholes-opset18": "tt_lstm", "lstm-reverse-batch-first": "tt_lstm",
         "lstm-opset9": "tt_lstm", "gru-reset-before-opset11": "tt_gru",
         "rnn-relu-reverse": "tt_rnn"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_imported_layer_is_fused_and_computes_what_onnx_defines(case):
    from tensortune.tasks import build_model
    from tensortune.workload import default_target

    model, feeds = _node_model(*CASES[case])
    imported = from_onnx(model)
    functions = {gv.name_hint for gv in imported.mod.get_global_vars()}
    assert (FUSED[case] in functions) if case in FUSED else functions == {"main"}
    compiled = build_model(imported, default_target(2), {})
    expected = _reference(model, feeds, layout=CASES[case][2])
    got = compiled.run(*feeds.values())
    assert len(got) == len(expected)
    for want, have in zip(expected, got):
        np.testing.assert_allclose(np.asarray(have), want, rtol=1e-5, atol=1e-5)
    assert compiled.default_functions() == []


def test_recurrent_template_configs_compute_the_same():
    """Seeds and sampled configs of ``cpu_recurrent`` on a bidirectional LSTM of 37 units
    (148 gate columns: vectors of 4), 3 examples, with peepholes and the last cell state,
    against the unscheduled function."""
    import tvm

    from tensortune.space import generic_cpu
    from tensortune.space.seeds import cpu_seeds
    from tensortune.space.template import apply_template, define_space

    r = Recurrence("LSTM", 9, 2, 3, 37, False, ("Sigmoid", "Tanh", "Tanh"), peepholes=True,
                   final_cell=True)
    func = recurrence_func(r)
    space = define_space(generic_cpu, func)
    assert {k.name for k in space.knobs} == {"tile_gates", "tile_k", "tile_cell", "parallel"}
    seeds = cpu_seeds(space, func, lanes=16, threads=2)
    assert seeds and seeds[0]["parallel"] == "directions"
    rng = np.random.default_rng(0)
    D, S, B, H, G = r.directions, r.steps, r.batch, r.hidden, r.gates
    shapes = [(S, B, D, G * H), (D, H, G * H), (D, G * H), (D, B, H), (D, B, H), (D, 3, H)]
    args = [(rng.standard_normal(sh) * 0.5).astype(np.float32) for sh in shapes]
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})

    def run(mod):
        out = tvm.runtime.tensor(np.zeros((r.rows, D, B, H), np.float32))
        tvm.compile(mod, target=target)(*[tvm.runtime.tensor(a) for a in args], out)
        return out.numpy()

    expected = run(tvm.IRModule({"main": func}))
    assert np.isfinite(expected).all() and np.abs(expected).max() > 0.05
    configs = seeds[:3] + [c for c in space.sample_many(8, rng) if c not in seeds][:3]
    checked = 0
    for config in configs:
        try:
            sch = apply_template(generic_cpu, func, space, config)
        except Exception as err:  # an oversized register tile is refused by name
            assert "register tile" in str(err)
            continue
        np.testing.assert_allclose(run(sch.mod), expected, rtol=1e-5, atol=1e-6)
        checked += 1
    assert checked >= 4


class Tagger(torch.nn.Module):
    """A sequence tagger: a 1-D convolution, a two-layer LSTM, a bidirectional GRU (PyTorch's
    ``linear_before_reset``), a classifier per step; 11 steps, irregular widths."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(13, 24, 3, padding=1)
        self.lstm = torch.nn.LSTM(24, 20, num_layers=2, batch_first=True)
        self.gru = torch.nn.GRU(20, 9, batch_first=True, bidirectional=True)
        self.fc = torch.nn.Linear(18, 5)

    def forward(self, x):
        x = torch.relu(self.conv(x)).transpose(1, 2)
        x, _ = self.lstm(x)
        x, _ = self.gru(x)
        return self.fc(x)


def test_pytorch_lstm_and_gru_import_build_and_match(tmp_path):
    from tensortune.tasks import build_model, extract_tasks
    from tensortune.workload import default_target

    torch.manual_seed(0)
    module = Tagger().eval()
    x = torch.randn(1, 13, 11)
    with torch.no_grad():
        expected = module(x).numpy()
    path = tmp_path / "tagger.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter warns about batch_first RNNs
        torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=14)
    assert {"LSTM", "GRU"} <= {n.op_type for n in onnx.load(str(path)).graph.node}
    model = from_onnx(path)
    compiled = build_model(model, default_target(2), {})
    np.testing.assert_allclose(compiled.run(x.numpy())[0], expected, rtol=1e-4, atol=1e-5)
    assert compiled.default_functions() == []
    # three layers, three fused functions (the LSTM's two layers differ in input width only,
    # which the projection before them takes), each a task the tuner measures
    fused = [t for t in extract_tasks(model, default_target(2))
             if t.name.startswith(("tt_lstm", "tt_gru"))]
    assert sorted(t.weight for t in fused) == [1, 2]
    assert all(t.tunable and "4 knobs" in t.reason for t in fused), [t.describe() for t in fused]


def test_what_cannot_be_unrolled_is_named():
    model, _ = _node_model("LSTM", {"clip": 3.0})
    with pytest.raises(ModelImportError, match="LSTM node .*clip"):
        from_onnx(model)
    model, _ = _node_model("GRU", {"activations": ["HardSigmoid", "Tanh"]})
    with pytest.raises(ModelImportError, match="HardSigmoid"):
        from_onnx(model)
    # per-example lengths shorter than the sequence (a padded batch) need masking
    model, _ = _node_model("RNN", {})
    model.graph.node[0].input[4] = "lens"
    model.graph.initializer.append(numpy_helper.from_array(np.array([7, 3], np.int32), "lens"))
    with pytest.raises(ModelImportError, match="sequence_lens"):
        from_onnx(model)
    # an operator nobody converts is still named first, the recurrent one is not
    model, _ = _node_model("LSTM", {})
    model.graph.node.append(helper.make_node("MadeUpOp", ["Y_h"], ["Z"]))
    with pytest.raises(UnsupportedOperatorError) as err:
        from_onnx(model)
    assert err.value.ops == ("MadeUpOp",)
