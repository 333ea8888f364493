"""The XGBoost cost model on a synthetic problem: knob features, a known cost function."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensortune.cost_model import CostModel, XGBoostModel, normalized_throughput, pairwise_accuracy
from tensortune.features import KnobFeatures
from tensortune.measure.types import ErrorKind, MeasureInput, MeasureResult
from tensortune.space import ChoiceKnob, ConfigSpace, SplitKnob
from tensortune.workload import Matmul, Task

SPACE = ConfigSpace([SplitKnob("tile_x", 64, 4), SplitKnob("tile_y", 64, 4),
                     SplitKnob("tile_k", 64, 2), ChoiceKnob("unroll", (0, 16, 64, 512)),
                     ChoiceKnob("order", ("a", "b"))])
TASK = Task(Matmul(m=64, n=64, k=64), {"kind": "llvm"})


def cost(config) -> float:
    """Seconds: a smooth function of the log tile sizes with one optimum."""
    x = [math.log2(v) for v in config["tile_x"]]
    y = [math.log2(v) for v in config["tile_y"]]
    k = [math.log2(v) for v in config["tile_k"]]
    penalty = ((x[3] - 2) ** 2 + (x[2] - 1) ** 2 + (y[3] - 4) ** 2 + 0.5 * (y[0] - 1) ** 2
               + 0.5 * (k[1] - 3) ** 2 + {0: 1.0, 16: 0.0, 64: 0.3, 512: 2.0}[config["unroll"]]
               + (0.5 if config["order"] == "b" else 0.0))
    return 1e-3 * math.exp(0.3 * penalty)


def measure(config, fail_unroll=None) -> MeasureResult:
    if config["unroll"] == fail_unroll:
        return MeasureResult((), ErrorKind.COMPILE_ERROR, "synthetic failure")
    c = cost(config)
    return MeasureResult((c, c * 1.01))


def dataset(n, seed, fail_unroll=None):
    configs = SPACE.sample_many(n, np.random.default_rng(seed))
    return ([MeasureInput(TASK, c) for c in configs], [measure(c, fail_unroll) for c in configs])


def truth(inputs):
    return np.array([-cost(i.config) for i in inputs])


def test_labels_are_throughput_relative_to_the_best_and_zero_for_failures():
    results = [MeasureResult((2.0,)), MeasureResult((1.0, 1.0)),
               MeasureResult((), ErrorKind.RUNTIME_ERROR), MeasureResult((4.0,))]
    assert normalized_throughput(results).tolist() == [0.5, 1.0, 0.0, 0.25]
    assert normalized_throughput([MeasureResult((), ErrorKind.TIMEOUT)]).tolist() == [0.0]


def test_absolute_labels_are_tflops_relative_ones_fall_back_and_scaling_keeps_ratios():
    from tensortune.cost_model.base import scale_labels, throughput_labels

    results = [MeasureResult((2.0,)), MeasureResult((1.0,)), MeasureResult((), ErrorKind.TIMEOUT)]
    assert throughput_labels(results, 4_000_000_000_000, "absolute").tolist() == [2.0, 4.0, 0.0]
    assert throughput_labels(results, 4_000_000_000_000, "relative").tolist() == [0.5, 1.0, 0.0]
    # no FLOP count: nothing absolute to say, so the task's own best is the unit
    assert throughput_labels(results, 0, "absolute").tolist() == [0.5, 1.0, 0.0]
    with pytest.raises(ValueError, match="unknown label 'gflops'"):
        throughput_labels(results, 1, "gflops")
    # one factor for all tasks: a task half as fast stays half as fast
    assert scale_labels(np.array([1e-5, 2e-5, 0.0, 4e-5])).tolist() == [0.25, 0.5, 0.0, 1.0]
    assert scale_labels(np.zeros(2)).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("label", ["absolute", "relative"])
def test_both_labels_learn_the_order_and_round_trip(tmp_path, label):
    train_x, train_y = dataset(300, seed=0)
    test_x, _ = dataset(200, seed=1)
    model = XGBoostModel(KnobFeatures(SPACE), objective="reg", label=label)
    model.fit(train_x, train_y)
    assert pairwise_accuracy(model.predict(test_x), truth(test_x)) > 0.8
    model.save(tmp_path / "m.json")
    loaded = XGBoostModel.load(tmp_path / "m.json", extractor=KnobFeatures(SPACE))
    assert loaded.label == label
    np.testing.assert_array_equal(loaded.predict(test_x), model.predict(test_x))
    with pytest.raises(ValueError, match="unknown label"):
        XGBoostModel(KnobFeatures(SPACE), label="tflops")


@pytest.mark.parametrize("objective", ["rank", "reg"])
def test_model_ranks_unseen_configs_much_better_than_chance(objective):
    train_x, train_y = dataset(300, seed=0)
    test_x, _ = dataset(300, seed=1)
    model = XGBoostModel(KnobFeatures(SPACE), objective=objective)
    assert isinstance(model, CostModel)
    model.fit(train_x, train_y)
    assert model.trained
    assert pairwise_accuracy(model.predict(test_x), truth(test_x)) > 0.8


def test_failures_are_learned_as_slowest():
    train_x, train_y = dataset(300, seed=0, fail_unroll=0)
    test_x, _ = dataset(300, seed=1)
    model = XGBoostModel(KnobFeatures(SPACE))
    model.fit(train_x, train_y)
    scores = model.predict(test_x)
    failing = np.array([i.config["unroll"] == 0 for i in test_x])
    assert scores[failing].mean() < scores[~failing].mean()


def test_too_few_good_samples_give_no_opinion():
    inputs, results = dataset(10, seed=2)
    results = results[:3] + [MeasureResult((), ErrorKind.TIMEOUT)] * 7
    model = XGBoostModel(KnobFeatures(SPACE))
    model.fit(inputs, results)
    assert not model.trained
    assert model.predict(inputs).tolist() == [0.0] * 10
    assert model.predict([]).shape == (0,)


def test_fit_checks_lengths_and_objective_names():
    inputs, results = dataset(5, seed=3)
    with pytest.raises(ValueError):
        XGBoostModel(KnobFeatures(SPACE)).fit(inputs, results[:4])
    with pytest.raises(ValueError, match="objective"):
        XGBoostModel(KnobFeatures(SPACE), objective="ndcg")
    with pytest.raises(ValueError, match="subsample"):
        XGBoostModel(KnobFeatures(SPACE), subsample=0.0)
    with pytest.raises(ValueError, match="colsample"):
        XGBoostModel(KnobFeatures(SPACE), colsample=1.5)


@pytest.mark.parametrize("objective", ["rank", "reg"])
def test_save_and_load_give_identical_predictions(tmp_path, objective):
    train_x, train_y = dataset(200, seed=4)
    test_x, _ = dataset(100, seed=5)
    model = XGBoostModel(KnobFeatures(SPACE), objective=objective, seed=3, subsample=0.7)
    model.fit(train_x, train_y)
    path = tmp_path / "model.json"
    model.save(path)
    loaded = XGBoostModel.load(path, extractor=KnobFeatures(SPACE))
    assert (loaded.objective, loaded.seed, loaded.subsample, loaded.colsample) == (
        objective, 3, 0.7, 0.8)
    np.testing.assert_array_equal(loaded.predict(test_x), model.predict(test_x))


def test_untrained_model_round_trips(tmp_path):
    path = tmp_path / "empty.json"
    XGBoostModel(KnobFeatures(SPACE), objective="reg").save(path)
    loaded = XGBoostModel.load(path, extractor=KnobFeatures(SPACE))
    assert not loaded.trained and loaded.objective == "reg"
    with pytest.raises(ValueError):
        (tmp_path / "other.json").write_text('{"format": "something else"}')
        XGBoostModel.load(tmp_path / "other.json")


def test_pretraining_warm_starts_a_model_with_little_new_data():
    history_x, history_y = dataset(300, seed=6)
    new_x, new_y = dataset(6, seed=7)
    test_x, _ = dataset(300, seed=8)
    cold = XGBoostModel(KnobFeatures(SPACE))
    cold.fit(new_x, new_y)
    warm = XGBoostModel(KnobFeatures(SPACE))
    warm.pretrain(history_x, history_y)
    assert warm.trained  # usable before any new measurement
    assert pairwise_accuracy(warm.predict(test_x), truth(test_x)) > 0.8
    warm.fit(new_x, new_y)  # the history stays in, down-weighted
    warm_acc = pairwise_accuracy(warm.predict(test_x), truth(test_x))
    assert warm_acc > 0.8
    assert warm_acc > pairwise_accuracy(cold.predict(test_x), truth(test_x)) + 0.05


def test_a_prescreened_model_saves_loads_and_predicts_like_its_costly_part(tmp_path):
    from tensortune.cost_model import Prescreened
    from tensortune.features import make_extractor
    from tensortune.space import task_space
    from tensortune.workload import default_target

    task = Task(Matmul(m=32, n=32, k=32), default_target(2))
    space = task_space(task)
    rng = np.random.default_rng(0)
    inputs = [MeasureInput(task, c) for c in space.sample_many(40, rng)]
    weights = rng.normal(size=len(space.knob_vector(inputs[0].config)))
    results = [MeasureResult((1e-3 * math.exp(0.1 * float(space.knob_vector(i.config) @ weights)),))
               for i in inputs]
    model = Prescreened(XGBoostModel(make_extractor("knob"), seed=1),
                        XGBoostModel(make_extractor("knob"), objective="reg", seed=2), 5)
    assert not model.trained
    model.fit(inputs, results)
    assert model.trained and model.extractor is model.costly.extractor
    np.testing.assert_array_equal(model.predict(inputs), model.costly.predict(inputs))
    model.save(tmp_path / "m.json")
    back = Prescreened.load(tmp_path / "m.json")
    assert back.shortlist == 5 and back.prescreen.extractor.name == "knob"
    np.testing.assert_allclose(back.predict(inputs), model.predict(inputs), rtol=1e-6)
    np.testing.assert_allclose(back.prescreen.predict(inputs), model.prescreen.predict(inputs),
                               rtol=1e-6)
    # files of version 1 named the parts at the top level
    import json

    doc = json.loads((tmp_path / "m.json").read_text())
    (tmp_path / "m.json").write_text(json.dumps({"format": doc["format"], "version": 1,
                                                 "shortlist": 5, **doc["parts"]}))
    np.testing.assert_allclose(Prescreened.load(tmp_path / "m.json").predict(inputs),
                               model.predict(inputs), rtol=1e-6)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a tensortune prescreened model"):
        Prescreened.load(tmp_path / "bad.json")
