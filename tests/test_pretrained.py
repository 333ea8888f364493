"""The pretrained cost model: save/load as JSON, fine-tuning on a task, hardware-free picks."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tensortune.cost_model import Prescreened, PretrainedModel
from tensortune.features import KnobFeatures
from tensortune.measure.types import MeasureInput
from tensortune.settings import Settings
from tests.test_cost_model import SPACE, TASK, cost, dataset, measure


def base_model(n=300, seed=0):
    """A base trained the way ``evaluation.pretrain`` trains one, on the synthetic task."""
    import xgboost as xgb

    inputs, results = dataset(n, seed)
    x = KnobFeatures(SPACE).extract(inputs)
    flops = TASK.workload.flops
    y = np.array([flops / r.cost / 1e12 for r in results])
    scale = float(y.max())  # labels in [0, 1], as in training
    booster = xgb.train({"objective": "reg:squarederror", "max_depth": 4, "eta": 0.1,
                         "nthread": 1, "seed": 0, "verbosity": 0},
                        xgb.DMatrix(x, label=y / scale), num_boost_round=80)
    return PretrainedModel(booster, KnobFeatures(SPACE), scale, {"datasets": ["synthetic"]})


def pearson(model, n=200, seed=5):
    configs = SPACE.sample_many(n, np.random.default_rng(seed))
    pred = model.predict([MeasureInput(TASK, c) for c in configs])
    truth = np.array([1 / cost(c) for c in configs])
    return float(np.corrcoef(pred, truth)[0, 1])


def test_round_trip_is_json_with_provenance_and_predicts_the_same(tmp_path):
    model = base_model()
    path = tmp_path / "m.json"
    model.save(path)
    doc = json.loads(path.read_text())  # text, not a pickle
    assert doc["format"] == "tensortune.pretrained" and doc["provenance"]["datasets"]
    assert doc["extractor"] == "knob" and doc["booster"]["learner"]
    loaded = PretrainedModel.load(path, extractor=KnobFeatures(SPACE))
    inputs = [MeasureInput(TASK, c) for c in SPACE.sample_many(20, np.random.default_rng(1))]
    assert np.allclose(model.predict(inputs), loaded.predict(inputs))
    assert pearson(loaded) > 0.8
    # predictions in TFLOP/s: the label scale applies
    assert np.allclose(loaded.predicted_tflops(inputs), loaded.predict(inputs) * model.label_scale)


def test_bad_files_are_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a pretrained tensortune model"):
        PretrainedModel.load(bad)
    with pytest.raises(ValueError, match="not a pretrained"):
        PretrainedModel.load(tmp_path / "missing.json")


def test_fine_tuning_adds_trees_on_the_base_and_never_forgets_it():
    weak = base_model(n=12, seed=3)  # a poor base: 12 records
    before = pearson(weak)
    inputs, results = dataset(120, 7)
    weak.fit(inputs[:2], results[:2])  # too few successes: the base alone
    assert weak._booster is weak.base
    weak.fit(inputs, results)
    assert weak._booster is not weak.base
    assert pearson(weak) > max(before, 0.8)
    weak.fit([], [])  # back to the base
    assert abs(pearson(weak) - before) < 1e-9


def test_hardware_free_pick_ranks_by_the_model_and_compiles_only_the_shortlist():
    from tensortune.search.evolution import evolve

    model = base_model()
    oracle_best = max(SPACE.sample_many(5000, np.random.default_rng(0)), key=lambda c: -cost(c))
    score = lambda cs: model.predict([MeasureInput(TASK, c) for c in cs])  # noqa: E731
    found = evolve(SPACE, score, 8, frozenset(), np.random.default_rng(0), Settings().search)
    assert len(found) == 8
    # the model's favourite is within 1.5x of the best of 5000 random configs
    assert cost(found[0]) <= 1.5 * cost(oracle_best)
    wrapped = Prescreened(model, model, shortlist=2)
    assert wrapped.predict([MeasureInput(TASK, found[0])]).shape == (1,)


class _Counting:
    """A stand-in model: a fixed score per config, and the size of every ``predict`` call."""

    def __init__(self, salt: int):
        self.salt, self.calls = salt, []

    def predict(self, inputs):
        self.calls.append(len(inputs))
        return np.array([float(hash((self.salt, json.dumps(i.config.to_json(), sort_keys=True)))
                               % 1000) for i in inputs])


@pytest.mark.parametrize("effort", ["fast", "full"])
def test_predict_many_ranks_several_tasks_in_one_costly_call_as_predict_best_does(effort):
    from tensortune.tuner.static import FAST_COMPILED, predict_best, predict_many
    from tensortune.workload import Conv2d, Matmul, Task, default_target

    target = default_target()
    tasks = [Task(Matmul(m=32, n=48, k=40), target), Task(Matmul(m=24, n=72, k=16), target),
             Task(Conv2d(n=1, c=3, h=15, w=15, filters=24, kh=3, kw=3, stride=2, padding=1),
                  target)]
    settings = Settings()
    costly = _Counting(1)
    many = list(predict_many(tasks, Prescreened(_Counting(0), costly), settings,
                             shortlist=4, effort=effort, batch=100))
    assert costly.calls == [sum(r.compiled for r in many)]  # every task's shortlist at once
    if effort == "fast":
        assert all(0 < r.compiled <= FAST_COMPILED for r in many)
    for task, got in zip(tasks, many, strict=True):
        alone = predict_best(task, Prescreened(_Counting(0), _Counting(1)), settings,
                             shortlist=4, effort=effort)
        assert got.task == task and got.ranked == alone.ranked and got.compiled == alone.compiled
    with pytest.raises(ValueError, match="unknown effort"):
        predict_many(tasks, costly, settings, effort="slow")


def test_fast_compiles_nothing_for_a_function_that_only_moves_data():
    import torch

    from tensortune.frontend import from_torch
    from tensortune.tasks import extract_tasks
    from tensortune.tuner.static import predict_many
    from tensortune.workload import default_target

    class Shuffle(torch.nn.Module):  # ShuffleNet's channel shuffle around a convolution
        def forward(self, x):
            return x.view(1, 2, 12, 9, 9).transpose(1, 2).reshape(1, 24, 9, 9)

    model = from_torch(torch.nn.Sequential(torch.nn.Conv2d(8, 24, 1), Shuffle()).eval(),
                       (torch.randn(1, 8, 9, 9),))
    tasks = [t.task for t in extract_tasks(model, default_target()) if t.tunable]
    moves = [t.workload.flops == 0 for t in tasks]
    assert any(moves) and not all(moves)
    cheap, costly = _Counting(0), _Counting(1)
    cheap.label_scale = 1e-3
    many = list(predict_many(tasks, Prescreened(cheap, costly), Settings(), effort="fast"))
    assert [r.compiled == 0 for r in many] == moves
    assert costly.calls == [sum(r.compiled for r in many)]
    from tensortune.space import task_seeds

    for r, task in ((r, t) for r, t, move in zip(many, tasks, moves) if move):
        # nothing to rank a data move by: the row-wise template's seeds, first seed first
        assert r.best is not None and r.best == task_seeds(task)[0]


def test_fast_compiles_each_register_tiles_best_before_any_tiles_second_variant():
    from tensortune.space import Config
    from tensortune.tuner.static import FAST_COMPILED, _diverse

    def conv(lanes, rows, unroll):
        return Config({"vector_axis": "ff", "tile_ff": (1, 1, 1, lanes),
                       "tile_xx": (1, 1, 1, rows), "tile_rc": (1, 58), "unroll": unroll})

    # the cheap model likes every variant of one ragged tile better than any other tile
    candidates = [conv(29, 7, 512), conv(29, 7, 64), conv(29, 7, 16), conv(29, 2, 512),
                  conv(4, 14, 16), conv(4, 14, 64)]
    scores = np.array([9.0, 8.0, 7.0, 3.0, 2.0, 1.0])
    picked = [candidates[i] for i in _diverse(candidates, scores, FAST_COMPILED)]
    assert picked == [conv(29, 7, 512), conv(29, 2, 512), conv(4, 14, 16), conv(29, 7, 64)]
