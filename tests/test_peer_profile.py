"""ONNX Runtime's own per-kernel profile, summed per operator and output shape."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tensortune.peers.ort_profile import onnxruntime_profile, summarize


def _model(path):
    """x[1,64] -> MatMul(64x32) -> Relu -> MatMul(32x32) -> Relu."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 32)).astype("float32"), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 32)).astype("float32"), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("MatMul", ["b", "w2"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
                              initializer=[w1, w2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_profile_counts_each_kernel_per_run(tmp_path):
    path = _model(tmp_path / "m.onnx")
    total, kernels = onnxruntime_profile(path, [np.ones((1, 64), "float32")], threads=1, runs=4)
    assert total > 0 and abs(total - sum(k.ms for k in kernels)) < 1e-9
    by_shape = {(k.op, k.shape): k for k in kernels}
    # two MatMul+Relu pairs, both to 32 outputs (ONNX Runtime may fuse each pair into one)
    assert sum(k.calls for k in kernels if k.shape == "1x32") in (2, 4), kernels
    assert all(k.calls >= 1 and k.ms >= 0 for k in by_shape.values())


def test_summarize_keeps_the_last_runs_and_averages_them():
    def node(ts, op, ms):
        return {"cat": "Node", "name": f"{op}_kernel_time", "ts": ts, "dur": ms * 1e3,
                "args": {"op_name": op, "output_type_shape": [{"float": [1, 8]}]}}
    events = [node(5, "Conv", 9.0), {"cat": "Session", "name": "model_run", "ts": 0, "dur": 10},
              node(15, "Conv", 2.0), node(16, "Relu", 1.0),
              {"cat": "Session", "name": "model_run", "ts": 14, "dur": 10},
              node(25, "Conv", 4.0), {"cat": "Session", "name": "model_run", "ts": 24, "dur": 10}]
    total, kernels = summarize(events, runs=2)  # the first (warm-up) run is left out
    assert [(k.op, k.shape, k.calls) for k in kernels] == [("Conv", "1x8", 1), ("Relu", "1x8", 1)]
    assert kernels[0].ms == 3.0 and total == 3.5


def test_interleaved_timing_settles_before_each_engine_and_keeps_round_medians():
    from tensortune.peers.models import time_interleaved

    order: list[str] = []
    engines = {name: (lambda n=name: order.append(n)) for name in ("a", "b")}
    times = time_interleaved(engines, rounds=3, per_round=4, settle_s=0.001)
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3}
    assert all(t >= 0 for v in times.values() for t in v)
    # each block is one untimed call then the timed ones, engines alternating by round
    assert order == (["a"] * 5 + ["b"] * 5) * 3
    order.clear()
    time_interleaved(engines, rounds=1, per_round=2, settle_s=0)
    assert order == ["a", "a", "b", "b"]
