"""Curve features (30-point relation curves of real schedules) and computation graphs of TIR."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensortune.features import CurveFeatures, GraphFeatures, make_extractor, task_graph
from tensortune.features.curve import CURVES, SAMPLES, _sample, curve_feature_names
from tensortune.features.graph import NODE_DIM, node_feature_names, prim_func_graph
from tensortune.measure.types import MeasureInput
from tensortune.space import Config, task_space
from tensortune.workload import Conv2d, Matmul, Task

TARGET = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}
MATMUL = Task(Matmul(m=64, n=64, k=64), TARGET)
CONV = Task(Conv2d(n=1, c=8, h=8, w=8, filters=8, kh=3, kw=3, padding=1), TARGET)
# i: 8 parallel x 4 x 1 x 2 (unrolled); j: 4 parallel x 1 x 1 x 16 (vectorized); k: 8 x 8
VECTORIZED = Config(tile_i=(8, 4, 1, 2), tile_j=(4, 1, 1, 16), tile_k=(8, 8), vector_axis="j",
                    outer="S1/1", pack_A="none", pack_B="none", unroll=0)


def curve(row: np.ndarray, buffer: int, name: str) -> np.ndarray:
    names = curve_feature_names()
    start = names.index(f"B{buffer}.{name}.0")
    return row[start: start + SAMPLES]


# -- curve features -----------------------------------------------------------------------------
def test_curve_sampling_is_piecewise_linear_with_the_outermost_point_winning_ties():
    grid = np.linspace(0, 4, 5)
    assert _sample([0, 2, 2, 4], [1, 3, 5, 5], grid).tolist() == [1, 3, 5, 5, 5]
    # x may not go back: a dip is held at the running maximum, and the end value holds
    assert _sample([0, 3, 2], [0, 3, 6], np.array([0.0, 1.5, 3.0, 9.0])).tolist() == [0, 3, 6, 6]
    assert _sample([], [], grid).tolist() == [0] * 5


def test_curve_rows_have_a_fixed_task_independent_width_of_30_point_curves():
    names = curve_feature_names()
    assert SAMPLES == 30 and len(CURVES) == 4
    assert sum(n.startswith("B0.reuse_vs_bytes.") for n in names) == 30
    ex = make_extractor("curve")
    assert isinstance(ex, CurveFeatures) and ex.dim == len(names) == 8 + 4 * 4 * 30
    rng = np.random.default_rng(0)
    for task in (MATMUL, CONV):
        configs = task_space(task).sample_many(8, rng)
        x = ex.extract([MeasureInput(task, c) for c in configs])
        assert x.shape == (8, ex.dim) and x.dtype == np.float32
        assert np.isfinite(x).all() and (x[:, 0] == 1).all()
        assert len({row.tobytes() for row in x}) == 8  # distinct tile configs, distinct rows
    assert ex.extract([]).shape == (0, ex.dim)
    with pytest.raises(ValueError, match="at least 2"):
        CurveFeatures(samples=1)


def test_curves_of_a_vectorized_matmul_tile_match_the_loop_nest():
    row = CurveFeatures().extract([MeasureInput(MATMUL, VECTORIZED)])[0]
    assert row[1] == 19 and row[3] == 4  # log2 flops (2 * 64^3), 16 vector lanes
    grid_end = {name: hi for name, (lo, hi) in CURVES.items()}
    assert grid_end["bytes_vs_iters"] > 18  # the grids reach past this whole nest
    for b in range(3):  # C (output), A, B: every buffer is 64 x 64 floats read 64 times each
        footprint = curve(row, b, "bytes_vs_iters")
        assert footprint[0] == 2  # one 4-byte element before any loop
        assert np.all(np.diff(footprint) >= -1e-6)  # footprints only grow outward
        assert footprint[-1] == pytest.approx(math.log2(64 * 64 * 4))
        assert curve(row, b, "reuse_vs_bytes")[-1] == pytest.approx(6)  # 64^3 / 64^2
        # the fix: dense curves, not one point and zeros
        assert len(np.unique(footprint)) > 10 and len(np.unique(curve(row, b, "count_vs_reuse"))) > 3
    assert not curve(row, 3, "bytes_vs_iters").any()  # no fourth buffer
    # B[k, j] along the innermost (vectorized) j loop: unit stride, log2(1 + 1)
    stride = curve(row, 2, "stride_vs_iters")
    assert stride[0] == pytest.approx(1)


def test_curve_features_of_an_invalid_config_are_a_zero_row():
    too_big = Config(dict(VECTORIZED.to_json(), tile_i=(2, 1, 1, 32), tile_j=(2, 1, 1, 32)))
    row = CurveFeatures().extract([MeasureInput(MATMUL, too_big)])[0]
    assert not row.any()


# -- graphs -------------------------------------------------------------------------------------
def conv_bias_relu():
    from tvm import te, tirx

    data, weight, conv = CONV.workload.build_te()  # padding 1: a pad stage, then the conv
    bias = te.placeholder((8,), "float32", name="bias")
    biased = te.compute(conv.shape, lambda n, f, y, x: conv[n, f, y, x] + bias[f], name="bias_add")
    relu = te.compute(conv.shape, lambda *i: te.max(biased(*i), tirx.const(0.0, "float32")),
                      name="relu")
    return te.create_prim_func([data, weight, bias, relu])


def test_graph_of_a_padded_conv2d_with_bias_and_relu():
    g = prim_func_graph(conv_bias_relu())
    assert g.names == ("buffer:data", "block:pad", "buffer:pad", "buffer:weight", "block:conv2d",
                       "buffer:conv2d", "buffer:bias", "block:bias_add", "buffer:bias_add",
                       "block:relu", "buffer:relu")
    kinds = dict(zip(g.names, g.kinds))
    assert [n for n in g.names if kinds[n] == "input"] == ["buffer:data", "buffer:weight",
                                                          "buffer:bias"]
    assert kinds["buffer:relu"] == "output"
    assert [kinds[n] for n in ("buffer:pad", "buffer:conv2d", "buffer:bias_add")] == ["intermediate"] * 3
    ops = {n: o for n, o in zip(g.names, g.op_types) if o is not None}
    assert ops == {"block:pad": "pad", "block:conv2d": "reduction", "block:bias_add": "broadcast",
                   "block:relu": "elementwise"}
    edges = {(g.names[a], g.names[b]) for a, b in g.edges.T}
    assert edges == {
        ("buffer:data", "block:pad"), ("block:pad", "buffer:pad"),
        ("buffer:pad", "block:conv2d"), ("buffer:weight", "block:conv2d"),
        ("block:conv2d", "buffer:conv2d"),
        ("buffer:conv2d", "block:bias_add"), ("buffer:bias", "block:bias_add"),
        ("block:bias_add", "buffer:bias_add"),
        ("buffer:bias_add", "block:relu"), ("block:relu", "buffer:relu"),
    }
    assert g.num_edges == 10 and g.node_features.shape == (11, NODE_DIM)
    assert all(a < b for a, b in g.edges.T)  # topological order
    adj = g.adjacency()
    assert (adj == adj.T).all() and adj.sum() == 20

    f = dict(zip(node_feature_names(), g.node_features[g.index("block:conv2d")]))
    assert f["kind.block"] == 1 and f["op.reduction"] == 1 and f["dtype.float32"] == 1
    assert [f[f"shape{d}"] for d in range(2, 6)] == pytest.approx(
        [math.log2(2), math.log2(9), math.log2(9), math.log2(9)])  # n=1, f=8, y=8, x=8
    assert [f[f"reduce{d}"] for d in range(3)] == pytest.approx([math.log2(9), 2, 2])  # rc, ry, rx
    assert f["log_size"] == pytest.approx(math.log2(8 * 8 * 8 * 8 * 3 * 3)) and f["reads"] == 2
    assert f["log_ops"] == pytest.approx(math.log2(1 + 2))  # one multiply, one add
    bias = dict(zip(node_feature_names(), g.node_features[g.index("buffer:bias")]))
    assert bias["shape5"] == pytest.approx(math.log2(9)) and bias["shape4"] == 0  # right-aligned
    assert bias["log_bytes"] == pytest.approx(math.log2(8 * 4)) and bias["rank"] == 1
    with pytest.raises(KeyError, match="no node"):
        g.index("block:softmax")


def test_graph_of_a_matmul_is_one_block_and_three_buffers():
    g = task_graph(MATMUL)
    assert g.names == ("buffer:A", "buffer:B", "block:C", "buffer:C")
    assert g.kinds == ("input", "input", "block", "output")
    assert g.op_types == (None, None, "reduction", None)
    assert g.edges.tolist() == [[0, 1, 2], [2, 2, 3]]
    assert task_graph(Task(Matmul(m=64, n=64, k=64), {"kind": "llvm"})) is g  # per workload


def test_flat_graph_features_tell_tasks_apart_but_not_configs():
    ex = make_extractor("graph")
    assert isinstance(ex, GraphFeatures) and ex.dim == 3 + NODE_DIM * 17
    rng = np.random.default_rng(1)
    inputs = [MeasureInput(t, c) for t in (MATMUL, CONV) for c in task_space(t).sample_many(3, rng)]
    x = ex.extract(inputs)
    assert x.shape == (6, ex.dim) and np.isfinite(x).all()
    assert (x[:3] == x[0]).all() and (x[3:] == x[3]).all() and not (x[0] == x[3]).all()
    assert x[0, :3].tolist() == [4, 3, 1] and x[3, :3].tolist() == [6, 5, 2]  # nodes, edges, blocks
    assert not x[0, 3 + NODE_DIM * 5:].any()  # matmul: 4 nodes, the other 12 slots are padding
