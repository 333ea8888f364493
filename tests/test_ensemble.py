"""The ensemble cost model: scale-free voting, batch independence, persistence, wiring."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensortune.cost_model import EnsembleModel, XGBoostModel, default_ensemble, pairwise_accuracy
from tensortune.features import make_extractor
from tensortune.measure.types import MeasureInput, MeasureResult
from tensortune.space import task_space
from tensortune.workload import Matmul, Task

TASK = Task(Matmul(m=32, n=32, k=32), {"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
SPACE = task_space(TASK)


def measured(n: int, seed: int):
    """``n`` configs with a synthetic cost that is a smooth function of their knob vector."""
    rng = np.random.default_rng(seed)
    configs = SPACE.sample_many(n, rng)
    weights = np.random.default_rng(99).normal(size=len(SPACE.knob_vector(configs[0])))
    inputs = [MeasureInput(TASK, c) for c in configs]
    return inputs, [MeasureResult((1e-3 * math.exp(0.1 * float(SPACE.knob_vector(c) @ weights)),))
                    for c in configs]


class Fixed:
    """A stand-in member whose score is a fixed function of the config (no learning)."""

    def __init__(self, fn, trained=True):
        self.fn, self.trained, self.fits = fn, trained, 0
        self.extractor = None

    def fit(self, inputs, results):
        self.fits += 1

    pretrain = fit

    def predict(self, inputs):
        if not self.trained:
            return np.zeros(len(inputs))
        return np.array([self.fn(SPACE.knob_vector(i.config)) for i in inputs], dtype=float)


def standardized(member, train, test):
    p = member.predict(train)
    return (member.predict(test) - p.mean()) / p.std()


def test_members_vote_on_standardized_scales_learned_at_fit_time():
    train, results = measured(40, seed=0)
    test, _ = measured(30, seed=1)
    small = Fixed(lambda v: 1e-3 * v.sum())
    huge = Fixed(lambda v: 1e6 * v[0] ** 2)
    model = EnsembleModel([small, huge], weights=[1.0, 3.0])
    model.fit(train, results)
    assert (small.fits, huge.fits) == (1, 1) and model.trained
    want = (standardized(small, train, test) + 3 * standardized(huge, train, test)) / 4
    np.testing.assert_allclose(model.predict(test), want, rtol=1e-9, atol=1e-12)
    # a candidate's score does not depend on what else is in its batch (annealing scores one)
    np.testing.assert_allclose([model.predict([t])[0] for t in test[:5]], want[:5], rtol=1e-9)


def test_a_member_without_an_opinion_is_left_out_and_none_gives_zeros():
    train, results = measured(30, seed=2)
    good, silent = Fixed(lambda v: v.sum()), Fixed(lambda v: 0.0, trained=False)
    model = EnsembleModel([good, silent])
    model.fit(train, results)
    assert not model.trained  # not every member has learned yet
    np.testing.assert_allclose(model.predict(train), standardized(good, train, train), rtol=1e-9)
    nobody = EnsembleModel([Fixed(lambda v: 0.0, trained=False)])
    nobody.fit(train, results)
    np.testing.assert_array_equal(nobody.predict(train), np.zeros(len(train)))


def test_bad_member_lists_and_weights_are_named():
    with pytest.raises(ValueError, match="at least one member"):
        EnsembleModel([])
    with pytest.raises(ValueError, match="2 members but 1 weights"):
        EnsembleModel([Fixed(sum), Fixed(sum)], weights=[1.0])
    with pytest.raises(ValueError, match="weights must be >= 0"):
        EnsembleModel([Fixed(sum)], weights=[-1.0])


def test_xgboost_and_gtuner_together_learn_the_order_and_round_trip(tmp_path):
    pytest.importorskip("torch")
    train, results = measured(120, seed=3)
    test, _ = measured(80, seed=4)
    model = default_ensemble(make_extractor("knob"), seed=1)
    assert [type(m).__name__ for m in model.members] == ["XGBoostModel", "GTunerModel"]
    assert all(m.label == "absolute" for m in model.members)
    model.fit(train, results)
    assert model.trained
    truth = np.array([-r.mean for r in measured(80, seed=4)[1]])
    assert pairwise_accuracy(model.predict(test), truth) > 0.75
    model.save(tmp_path / "ens.json")
    back = EnsembleModel.load(tmp_path / "ens.json")
    assert back.weights == model.weights and back.extractor.name == "knob"
    np.testing.assert_allclose(back.predict(test), model.predict(test), rtol=1e-5, atol=1e-6)
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a tensortune ensemble model"):
        EnsembleModel.load(tmp_path / "bad.json")


def test_the_ensemble_is_a_named_model_and_a_tuner():
    from tensortune.evaluation import MODELS, make_model
    from tensortune.settings import Settings
    from tensortune.tuner import TUNERS, make_loop

    assert "ensemble" in MODELS and "ensemble" in TUNERS
    model = make_model("ensemble", make_extractor("knob"), seed=2, label="relative")
    assert isinstance(model, EnsembleModel)
    assert [m.label for m in model.members] == ["relative", "relative"]
    loop = make_loop("ensemble", SPACE, Settings(), "knob", prescreen="knob")
    assert isinstance(loop.model.costly, EnsembleModel)
    assert isinstance(loop.model.prescreen, XGBoostModel)
