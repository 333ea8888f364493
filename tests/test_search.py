"""Search strategies on a synthetic space (no TVM schedules): contracts and search quality."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tensortune.search import STRATEGIES
from tensortune.settings import SearchSettings
from tensortune.space import ChoiceKnob, Config, ConfigSpace, SplitKnob
from tensortune.workload import Matmul, Task

SPACE = ConfigSpace([SplitKnob("tile_x", 64, 4), SplitKnob("tile_y", 64, 4),
                     SplitKnob("tile_k", 64, 2), ChoiceKnob("unroll", (0, 16, 64, 512)),
                     ChoiceKnob("order", ("a", "b"))])
TASK = Task(Matmul(m=64, n=64, k=64), {"kind": "llvm"})
BEST = Config(tile_x=(8, 1, 2, 4), tile_y=(2, 1, 2, 16), tile_k=(8, 8), unroll=16, order="a")


def score(config: Config) -> float:
    """A known smooth landscape over tile sizes with one optimum (``BEST``); higher is better."""
    x = [math.log2(v) for v in config["tile_x"]]
    y = [math.log2(v) for v in config["tile_y"]]
    k = [math.log2(v) for v in config["tile_k"]]
    penalty = ((x[3] - 2) ** 2 + (x[2] - 1) ** 2 + (y[3] - 4) ** 2 + 0.5 * (y[0] - 1) ** 2
               + 0.5 * (k[1] - 3) ** 2 + {0: 1.0, 16: 0.0, 64: 0.3, 512: 2.0}[config["unroll"]]
               + (0.5 if config["order"] == "b" else 0.0))
    return -0.3 * penalty


class Oracle:
    """A cost model whose prediction is the true score; records each call's batch size."""

    def __init__(self):
        self.batches: list[int] = []

    def predict(self, inputs):
        self.batches.append(len(inputs))
        return np.array([score(i.config) for i in inputs])


class Flat:
    """An untrained model: no opinion at all."""

    def predict(self, inputs):
        return np.zeros(len(inputs))


def run(name, n, exclude=frozenset(), model=None, seed=0, settings=SearchSettings(), seeds=(),
        space=SPACE):
    return STRATEGIES[name](space, model, TASK, n, exclude, np.random.default_rng(seed), settings,
                            seeds=seeds)


def test_strategy_table_names_the_strategies():
    assert set(STRATEGIES) == {"random", "grid", "sa", "ga", "es", "hill"}


@pytest.mark.parametrize("name,model", [("random", None), ("grid", None), ("sa", None),
                                        ("sa", Flat()), ("sa", Oracle())])
def test_returns_n_distinct_unexplored_configs(name, model):
    exclude = set(SPACE.sample_many(200, np.random.default_rng(7))) | {SPACE.get(i) for i in range(50)}
    out = run(name, 24, exclude, model)
    assert len(out) == 24
    assert len(set(out)) == 24
    assert not set(out) & exclude
    assert all(c in SPACE for c in out)


def test_grid_is_index_order_skipping_excluded():
    exclude = {SPACE.get(i) for i in (0, 2, 5)}
    out = run("grid", 5, exclude, seed=1)
    assert [SPACE.index(c) for c in out] == [1, 3, 4, 6, 7]
    assert run("grid", 5, exclude, seed=2) == out


def test_small_space_is_exhausted_exactly():
    space = ConfigSpace([SplitKnob("t", 4, 2), ChoiceKnob("u", (0, 1, 2, 3))])  # 3 * 4 configs
    exclude = {space.get(i) for i in range(len(space)) if i not in (4, 9)}
    for name, model in (("random", None), ("grid", None), ("sa", Flat())):
        out = run(name, 5, exclude, model, space=space)
        assert sorted(space.index(c) for c in out) == [4, 9], name


def test_annealing_with_oracle_finds_top_percent_where_random_does_not():
    reference = np.array([score(c) for c in SPACE.sample_many(20_000, np.random.default_rng(99))])
    top1 = np.quantile(reference, 0.99)
    n = 32
    settings = SearchSettings(epsilon=0.0)
    annealed = [score(c) for c in run("sa", n, model=Oracle(), settings=settings)]
    sampled = [score(c) for c in run("random", n)]
    assert max(annealed) >= top1
    assert sum(s >= top1 for s in annealed) >= n // 2
    assert sum(s >= top1 for s in sampled) <= 3  # about 0.3 expected
    assert np.median(annealed) > max(sampled)


def test_annealing_predicts_once_per_step_over_all_chains():
    settings = SearchSettings(sa_chains=16, sa_steps=10, sa_restarts=1, sa_early_stop=0)
    oracle = Oracle()
    run("sa", 8, model=oracle, settings=settings)
    assert 0 < len(oracle.batches) <= (1 + settings.sa_restarts) * (1 + settings.sa_steps)
    assert max(oracle.batches) <= settings.sa_chains


def test_annealing_stops_early_on_a_flat_model():
    settings = SearchSettings(sa_chains=8, sa_steps=200, sa_early_stop=5, sa_restarts=0)
    calls = []

    class CountingFlat(Flat):
        def predict(self, inputs):
            calls.append(len(inputs))
            return super().predict(inputs)

    out = run("sa", 8, model=CountingFlat(), settings=settings)
    assert len(out) == 8
    assert len(calls) < 20  # the top set stops changing once full of equal scores


def test_annealing_starts_from_seeds():
    settings = SearchSettings(sa_steps=0, sa_restarts=0, epsilon=0.0, sa_chains=4)
    out = run("sa", 1, model=Oracle(), settings=settings, seeds=[BEST])
    assert out == [BEST]


def test_epsilon_replaces_model_picks_with_random_ones():
    all_random = dataclasses.replace(SearchSettings(), epsilon=1.0)
    oracle = Oracle()
    out = run("sa", 10, model=oracle, settings=all_random)
    assert len(set(out)) == 10 and oracle.batches == []
    half = dataclasses.replace(SearchSettings(), epsilon=0.5)
    oracle = Oracle()
    out = run("sa", 10, model=oracle, settings=half)
    assert len(set(out)) == 10 and oracle.batches
    scores = [score(c) for c in out]
    assert min(scores[:5]) > np.median(scores[5:])  # model picks first, best-first


class Costly:
    """A model that is expensive to ask: records every config it scores."""

    def __init__(self, fn):
        self.fn, self.asked = fn, []

    def predict(self, inputs):
        self.asked.extend(i.config for i in inputs)
        return np.array([self.fn(i.config) for i in inputs])


@pytest.mark.parametrize("name", ["sa", "ga"])
def test_a_prescreened_model_is_asked_only_about_the_shortlist_and_picks_the_batch(name):
    from tensortune.cost_model import Prescreened

    no_random = dataclasses.replace(SearchSettings(), epsilon=0.0)
    cheap = Oracle()
    # the costly model prefers the other loop order, which the cheap one mildly penalizes
    costly = Costly(lambda c: score(c) + (1.0 if c["order"] == "b" else 0.0))
    out = run(name, 8, model=Prescreened(cheap, costly, shortlist=3), settings=no_random)
    assert len(set(out)) == 8
    assert len(costly.asked) <= 3 * 8 and set(out) <= set(costly.asked)  # one look, shortlist only
    assert sum(cheap.batches) > 10 * len(costly.asked)  # the walk ran on the cheap model
    picked = sorted(costly.asked, key=costly.fn, reverse=True)[:8]
    assert out == picked  # the costly model's favourites of the shortlist, best first
