"""The GTuner graph-attention cost model on real tiny tasks with a synthetic, known cost law.

Configs come from the real config spaces of two matmuls (features from their real schedules);
their "measured" cost is a smooth function of what the schedule does (vector width, register
tile, inner reduction tile, parallelism, unrolling), the same law for both tasks, so a model
that learned it on one task can transfer to the other. Nothing is compiled or timed.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("torch")

from tensortune.cost_model import CostModel, GTunerModel  # noqa: E402
from tensortune.cost_model.metrics import evaluate_model, pairwise_accuracy  # noqa: E402
from tensortune.features import IterVarFeatures, KnobFeatures  # noqa: E402
from tensortune.measure.types import ErrorKind, MeasureInput, MeasureResult  # noqa: E402
from tensortune.space import task_space  # noqa: E402
from tensortune.workload import Conv2d, Matmul, Task  # noqa: E402

TARGET = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}
TASK_A = Task(Matmul(m=64, n=64, k=64), TARGET)
TASK_B = Task(Matmul(m=32, n=128, k=96), TARGET)
EXTRACTOR = IterVarFeatures()  # shared, so each config's schedule is analysed once per module


def cost(task: Task, config) -> float:
    """Synthetic seconds: one optimum at 16 vector lanes, a 64-element register tile, an inner
    reduction tile of 8, at least two parallel tiles and unroll 64; scaled by the FLOPs."""
    spatial = [v for k, v in config.items() if k.startswith("tile_") and len(v) == 4]
    reduce_ = [v for k, v in config.items() if k.startswith("tile_") and len(v) == 2]
    vector = config[f"tile_{config['vector_axis']}"][-1]
    register = math.prod(t[-1] for t in spatial)
    parallel = math.prod(t[0] for t in spatial)
    inner = math.prod(t[-1] for t in reduce_)
    penalty = ((math.log2(vector) - 4) ** 2 + 0.5 * (math.log2(register) - 6) ** 2
               + 0.3 * (math.log2(inner) - 3) ** 2 + (1.5 if parallel < 2 else 0.0)
               + {0: 0.8, 16: 0.3, 64: 0.0, 512: 0.6}[config["unroll"]])
    return task.workload.flops * 1e-11 * math.exp(0.3 * penalty)


def dataset(task: Task, n: int, seed: int, exclude=()):
    """``n`` distinct configs the template accepts, with their synthetic measurements."""
    space = task_space(task)
    configs = space.sample_many(2 * n, np.random.default_rng(seed), exclude=set(exclude))
    configs = [c for c in configs
               if math.prod(v[-1] for k, v in c.items() if k.startswith("tile_") and len(v) == 4)
               <= 512][:n]
    assert len(configs) == n
    return ([MeasureInput(task, c) for c in configs],
            [MeasureResult((cost(task, c),)) for c in configs])


def truth(inputs) -> np.ndarray:
    return np.array([-cost(i.task, i.config) for i in inputs])


@pytest.fixture(scope="module")
def data_a():
    train = dataset(TASK_A, 400, seed=0)
    test = dataset(TASK_A, 300, seed=1, exclude=[i.config for i in train[0]])
    return train, test


@pytest.fixture(scope="module")
def data_b():
    test = dataset(TASK_B, 300, seed=2)
    few = dataset(TASK_B, 16, seed=3, exclude=[i.config for i in test[0]])
    return few, test


@pytest.fixture(scope="module")
def model_a(data_a):
    (train_x, train_y), _ = data_a
    model = GTunerModel(EXTRACTOR, seed=0)
    model.fit(train_x, train_y)
    return model


def test_gtuner_is_a_cost_model_with_no_opinion_until_trained():
    model = GTunerModel(EXTRACTOR)
    assert isinstance(model, CostModel) and not model.trained
    inputs, results = dataset(TASK_A, 6, seed=4)
    assert model.predict(inputs).tolist() == [0.0] * 6
    failed = [MeasureResult((), ErrorKind.RUNTIME_ERROR)] * 3
    model.fit(inputs, results[:3] + failed)  # 3 successes < min_good = 4: nothing learned
    assert not model.trained and model.predict([]).shape == (0,)
    with pytest.raises(ValueError, match="inputs but"):
        model.fit(inputs, results[:5])
    with pytest.raises(ValueError, match="multiple of heads"):
        GTunerModel(EXTRACTOR, hidden=30, heads=4)


def test_gtuner_ranks_held_out_configs_far_better_than_chance(data_a, model_a):
    _, (test_x, test_y) = data_a
    scores = model_a.predict(test_x)
    assert scores.shape == (300,) and np.isfinite(scores).all()
    acc = pairwise_accuracy(scores, truth(test_x))
    assert acc > 0.85  # measured about 0.96; chance is 0.5
    best_true = int(np.argmax(truth(test_x)))
    assert scores[best_true] > np.quantile(scores, 0.9)  # the best config is among its favourites


def test_evaluate_model_reports_the_cost_model_metrics(data_a):
    (train_x, train_y), (test_x, test_y) = data_a
    model = GTunerModel(EXTRACTOR, seed=1, epochs=30)
    report = evaluate_model(model, train_x[:200], train_y[:200], test_x, test_y, k=10)
    assert report["n_test"] == 300 and report["n_failed"] == 0 and report["k"] == 10
    assert report["pearson"] > 0.5 and report["spearman"] > 0.7 and report["pairwise"] > 0.75
    assert 0.0 < report["topk"] <= 1.0


def test_training_is_deterministic_for_a_seed(data_a, model_a):
    (train_x, train_y), (test_x, _) = data_a
    again = GTunerModel(EXTRACTOR, seed=0)
    again.fit(train_x, train_y)
    np.testing.assert_array_equal(again.predict(test_x), model_a.predict(test_x))


def test_pretraining_on_another_task_beats_a_cold_start_with_few_measurements(data_a, data_b):
    (history_x, history_y), _ = data_a
    (few_x, few_y), (test_x, _) = data_b
    warm = GTunerModel(EXTRACTOR, seed=0)
    warm.pretrain(history_x, history_y)
    zero_shot = pairwise_accuracy(warm.predict(test_x), truth(test_x))
    warm.fit(few_x, few_y)  # fine-tunes the pretrained weights on 16 measurements of task B
    warm_acc = pairwise_accuracy(warm.predict(test_x), truth(test_x))
    cold = GTunerModel(EXTRACTOR, seed=0)
    cold.fit(few_x, few_y)
    cold_acc = pairwise_accuracy(cold.predict(test_x), truth(test_x))
    assert zero_shot > 0.85  # same cost law, task-independent features: it transfers as is
    assert warm_acc > 0.85
    assert warm_acc > cold_acc + 0.05


def test_predictions_of_mixed_tasks_match_per_task_predictions(data_a, data_b, model_a):
    _, (test_a, _) = data_a
    _, (test_b, _) = data_b
    mixed = [x for pair in zip(test_a[:20], test_b[:20]) for x in pair]
    scores = model_a.predict(mixed)
    np.testing.assert_allclose(scores[0::2], model_a.predict(test_a[:20]), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(scores[1::2], model_a.predict(test_b[:20]), rtol=1e-6, atol=1e-7)


def test_save_and_load_give_identical_predictions(tmp_path, data_a, model_a):
    _, (test_x, _) = data_a
    path = tmp_path / "gtuner.pt"
    model_a.save(path)
    loaded = GTunerModel.load(path, extractor=EXTRACTOR)
    assert loaded.trained and loaded.seed == 0 and loaded.hidden == model_a.hidden
    np.testing.assert_array_equal(loaded.predict(test_x), model_a.predict(test_x))
    by_name = GTunerModel.load(path)  # extractor rebuilt from its name
    assert by_name.extractor.name == "itervar"

    empty = tmp_path / "empty.pt"
    GTunerModel(EXTRACTOR, hidden=32, seed=5, label="absolute").save(empty)
    restored = GTunerModel.load(empty, extractor=EXTRACTOR)
    assert not restored.trained and (restored.hidden, restored.seed) == (32, 5)
    assert (loaded.label, restored.label) == ("relative", "absolute")
    with pytest.raises(ValueError, match="unknown label"):
        GTunerModel(EXTRACTOR, label="best")
    (tmp_path / "other.pt").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a tensortune GTuner model"):
        GTunerModel.load(tmp_path / "other.pt")


def test_task_specific_features_cannot_be_mixed_across_tasks():
    conv = Task(Conv2d(n=1, c=4, h=6, w=6, filters=4, kh=3, kw=3, padding=1), TARGET)
    model = GTunerModel(KnobFeatures(), epochs=2)
    model.fit(*dataset(TASK_A, 8, seed=5))
    assert model.trained
    conv_inputs = [MeasureInput(conv, c) for c in task_space(conv).sample_many(6, np.random.default_rng(0))]
    conv_results = [MeasureResult((1e-3 * (i + 1),)) for i in range(6)]
    assert model.predict(conv_inputs).tolist() == [0.0] * 6  # another width: no opinion
    with pytest.raises(ValueError, match="task-independent"):
        model.fit(conv_inputs, conv_results)
