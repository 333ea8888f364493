"""Feature extractors: knob vectors, and itervar features of real schedules on tiny shapes."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensortune.features import (ConcatFeatures, FeatureExtractor, IterVarFeatures, KnobFeatures,
                                 feature_names, make_extractor)
from tensortune.features.itervar import KINDS
from tensortune.measure.types import MeasureInput
from tensortune.space import ChoiceKnob, Config, ConfigSpace, SplitKnob, task_space
from tensortune.workload import Conv2d, Matmul, Task, default_target

SYNTH = ConfigSpace([SplitKnob("tile_x", 64, 4), SplitKnob("tile_k", 16, 2),
                     ChoiceKnob("unroll", (0, 16, 64)), ChoiceKnob("order", ("a", "b"))])
SYNTH_TASK = Task(Matmul(m=64, n=64, k=16), {"kind": "llvm"})
MATMUL = Task(Matmul(m=64, n=64, k=64), default_target())
# i: 8 parallel x 4 x 1 x 2 (unrolled); j: 4 parallel x 1 x 1 x 16 (vectorized); k: 8 x 8
VECTORIZED = Config(tile_i=(8, 4, 1, 2), tile_j=(4, 1, 1, 16), tile_k=(8, 8), vector_axis="j",
                    outer="S1/1", pack_A="none", pack_B="none", unroll=0)


@pytest.fixture(scope="module")
def matmul_space():
    return task_space(MATMUL)


def named(row: np.ndarray) -> dict[str, float]:
    names = feature_names()
    assert row.shape == (len(names),)
    return dict(zip(names, row.tolist()))


def test_knob_features_are_log_factors_and_choice_indices():
    ex = KnobFeatures(SYNTH)
    assert isinstance(ex, FeatureExtractor) and ex.name == "knob"
    config = Config(tile_x=(2, 4, 1, 8), tile_k=(16, 1), unroll=64, order="b")
    x = ex.extract([MeasureInput(SYNTH_TASK, config), MeasureInput(SYNTH_TASK, SYNTH.get(0))])
    assert x.dtype == np.float32 and x.shape == (2, 4 + 2 + 1 + 1)
    assert x[0].tolist() == [1, 2, 0, 3, 4, 0, 2, 1]
    assert ex.extract([]).shape == (0, 8)


def test_knob_features_define_the_space_of_each_task_lazily(matmul_space):
    ex = make_extractor("knob")
    configs = matmul_space.sample_many(5, np.random.default_rng(0))
    x = ex.extract([MeasureInput(MATMUL, c) for c in configs])
    assert x.shape == (5, len(matmul_space.knob_vector(configs[0])))
    np.testing.assert_array_equal(x[2], matmul_space.knob_vector(configs[2]))


def test_make_extractor_names_and_concatenation():
    assert isinstance(make_extractor("itervar"), IterVarFeatures)
    both = make_extractor("knob+itervar")
    assert isinstance(both, ConcatFeatures) and both.name == "knob+itervar"
    assert make_extractor(["knob", "itervar"]).name == "knob+itervar"
    with pytest.raises(ValueError, match="unknown feature"):
        make_extractor("knob+ast")


def test_itervar_features_of_a_vectorized_matmul_tile(matmul_space):
    f = named(IterVarFeatures().extract([MeasureInput(MATMUL, VECTORIZED)])[0])
    assert f["applied"] == 1 and f["log_flops"] == 19  # 2 * 64^3
    assert f["n_loops"] == 9  # fused(i0, j0), i1, j1, k0, i2, j2, k1, i3, j3
    assert f["log_parallel"] == 5 and f["log_vector"] == 4 and f["log_unrolled"] == 1
    assert f["log_iters"] == 18
    # levels are right-aligned: L11 is the innermost loop j3 (16 lanes, vectorized)
    assert f["L11.extent"] == 4 and f["L11.vectorized"] == 1 and f["L11.serial"] == 0
    assert f["L10.extent"] == 1 and f["L10.unrolled"] == 1  # i3, 2 iterations
    assert f["L3.extent"] == 5 and f["L3.parallel"] == 1  # 32 fused outer tiles
    assert f["L2.extent"] == 0 and f["L2.serial"] == 0  # padding
    # buffers: B0 = C_global (output), B1 = A, B2 = B, B3 = none
    log_bytes = lambda elements: pytest.approx(math.log2(1 + 4 * elements), abs=1e-5)
    assert f["L11.B0.bytes"] == log_bytes(16) and f["L11.B0.stride"] == 1  # C[i, j3]: unit stride
    assert f["L11.B1.bytes"] == log_bytes(1) and f["L11.B1.stride"] == 0  # A[i, k] ignores j
    assert f["L11.B1.reuse"] == 4  # one A element for 16 iterations
    assert f["L11.B2.bytes"] == log_bytes(16) and f["L11.B2.reuse"] == 0
    assert f["L10.B0.stride"] == pytest.approx(math.log2(1 + 64))  # i3 steps a row of C
    assert f["L9.B1.stride"] == 1 and f["L9.B2.stride"] == pytest.approx(math.log2(1 + 64))  # k1
    assert f["L9.B1.bytes"] == log_bytes(2 * 8)  # A tile 2 x 8 below k1
    assert f["L3.B0.bytes"] == log_bytes(64 * 64) and f["L3.B0.reuse"] == 6  # 64^3 / 64^2
    assert all(f[f"L{lv}.B3.{k}"] == 0 for lv in range(12) for k in ("stride", "bytes", "reuse"))


def test_itervar_dim_is_constant_and_invalid_configs_give_a_zero_row(matmul_space):
    ex = IterVarFeatures()
    configs = matmul_space.sample_many(12, np.random.default_rng(3))
    too_big = Config(dict(VECTORIZED.to_json(), tile_i=(2, 1, 1, 32), tile_j=(2, 1, 1, 32)))
    x = ex.extract([MeasureInput(MATMUL, c) for c in configs + [too_big]])
    assert x.shape == (13, ex.dim) == (13, len(feature_names()))
    assert np.isfinite(x).all()
    assert (x[-1] == 0).all()  # register tile over the limit: the template refuses it
    assert (x[:-1, 0] == 1).sum() >= 1
    assert len({row.tobytes() for row in x[:-1]}) == 12  # distinct configs, distinct rows


def test_itervar_rows_are_cached_per_instance_and_bounded(matmul_space):
    ex = IterVarFeatures(cache_size=2)
    configs = matmul_space.sample_many(3, np.random.default_rng(4))
    first = ex.extract([MeasureInput(MATMUL, c) for c in configs])
    assert len(ex._rows) == 2
    again = ex.extract([MeasureInput(MATMUL, configs[2])])
    np.testing.assert_array_equal(again[0], first[2])


def test_itervar_conv2d_with_deep_nest_keeps_the_innermost_levels():
    task = Task(Conv2d(n=1, c=8, h=8, w=8, filters=8, kh=3, kw=3, padding=1), default_target())
    space = task_space(task)
    ex = IterVarFeatures()
    configs = space.sample_many(6, np.random.default_rng(5))
    x = ex.extract([MeasureInput(task, c) for c in configs])
    applied = x[x[:, 0] == 1]
    assert len(applied) >= 1 and np.isfinite(x).all()
    f = named(applied[0])
    assert f["log_flops"] == pytest.approx(math.log2(task.workload.flops))
    assert f["n_loops"] > 12  # 4 spatial x 4 levels + 3 reductions x 2 (fused outermost)
    assert sum(f[f"L0.{k}"] for k in KINDS) == 1  # every slot holds a loop, none is padding
    # the conv2d output, the (padded) data and the weights are the buffers
    assert f["L11.B0.bytes"] > 0 and f["L11.B1.bytes"] > 0 and f["L11.B2.bytes"] > 0


def test_concatenated_features_line_up(matmul_space):
    configs = matmul_space.sample_many(4, np.random.default_rng(6))
    inputs = [MeasureInput(MATMUL, c) for c in configs]
    knob, itervar = KnobFeatures(), IterVarFeatures()
    both = ConcatFeatures([knob, itervar]).extract(inputs)
    np.testing.assert_array_equal(both, np.hstack([knob.extract(inputs), itervar.extract(inputs)]))


def test_concatenated_extractors_apply_the_template_once_per_candidate(monkeypatch):
    import tensortune.space as space_module
    from tensortune.features.cache import CacheFeatures

    task = Task(Matmul(m=48, n=40, k=24), default_target())
    configs = task_space(task).sample_many(3, np.random.default_rng(0))
    applied = []
    real = space_module.apply_config
    monkeypatch.setattr(space_module, "apply_config",
                        lambda t, c, s=None: applied.append(c) or real(t, c, s))
    both = ConcatFeatures([IterVarFeatures(), CacheFeatures()])
    rows = both.extract([MeasureInput(task, c) for c in configs])
    assert rows.shape[0] == 3 and sorted(map(hash, applied)) == sorted(map(hash, configs))
    alone = ConcatFeatures([IterVarFeatures()]).extract([MeasureInput(task, c) for c in configs])
    np.testing.assert_array_equal(rows[:, :alone.shape[1]], alone)  # the same rows as unshared
