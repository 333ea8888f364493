"""Genetic search on a synthetic space with an oracle model: contract, operators, quality."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tensortune.search import STRATEGIES
from tensortune.search.genetic import crossover, evolve
from tensortune.settings import SearchSettings
from tensortune.space import ChoiceKnob, Config, ConfigSpace, SplitKnob
from tests.test_search import BEST, SPACE, TASK, Flat, Oracle, score


def run(name, n, exclude=frozenset(), model=None, seed=0, settings=SearchSettings(), seeds=(),
        space=SPACE):
    return STRATEGIES[name](space, model, TASK, n, exclude, np.random.default_rng(seed), settings,
                            seeds=seeds)


@pytest.mark.parametrize("model", [None, Flat(), Oracle()])
def test_returns_n_distinct_unexplored_configs(model):
    exclude = set(SPACE.sample_many(200, np.random.default_rng(7)))
    exclude |= {SPACE.get(i) for i in range(50)}
    out = run("ga", 24, exclude, model)
    assert len(out) == 24 and len(set(out)) == 24
    assert not set(out) & exclude
    assert all(c in SPACE for c in out)


def test_crossover_takes_every_knob_from_one_of_the_parents():
    rng = np.random.default_rng(3)
    a, b = SPACE.sample(rng), SPACE.sample(rng)
    assert sum(a[k] != b[k] for k in a) >= 2
    children = [crossover(SPACE, a, b, rng) for _ in range(64)]
    for child in children:
        assert child in SPACE
        assert all(child[k] in (a[k], b[k]) for k in child)
    # with uniform crossover both parents pass on genes, so children differ from both
    assert any(c != a and c != b for c in children)


def test_genetic_with_oracle_finds_top_percent_where_random_does_not():
    reference = np.array([score(c) for c in SPACE.sample_many(20_000, np.random.default_rng(99))])
    top1 = np.quantile(reference, 0.99)
    n = 32
    settings = SearchSettings(epsilon=0.0)
    evolved = [score(c) for c in run("ga", n, model=Oracle(), settings=settings)]
    sampled = [score(c) for c in run("random", n)]
    assert max(evolved) >= top1
    assert sum(s >= top1 for s in evolved) >= n // 2
    assert sum(s >= top1 for s in sampled) <= 3  # about 0.3 expected
    assert np.median(evolved) > max(sampled)
    assert evolved == sorted(evolved, reverse=True)  # best first


def test_more_generations_do_not_get_worse_and_each_scores_once():
    scores = {}
    for generations in (0, 10):
        oracle = Oracle()
        settings = SearchSettings(epsilon=0.0, ga_generations=generations, ga_population=64)
        out = run("ga", 8, model=oracle, settings=settings, seed=1)
        scores[generations] = np.mean([score(c) for c in out])
        assert len(oracle.batches) == 1 + generations  # one predict call per generation
        assert max(oracle.batches) <= 64
    assert scores[10] > scores[0]


def test_elitism_keeps_the_seed_optimum_and_search_starts_from_seeds():
    settings = SearchSettings(epsilon=0.0, ga_generations=3, ga_population=16, ga_elite=2)
    out = run("ga", 1, model=Oracle(), settings=settings, seeds=[BEST])
    assert out == [BEST]
    excluded = run("ga", 4, exclude={BEST}, model=Oracle(), settings=settings, seeds=[BEST])
    assert BEST not in excluded and len(excluded) == 4


def test_small_space_is_exhausted_exactly():
    space = ConfigSpace([SplitKnob("t", 4, 2), ChoiceKnob("u", (0, 1, 2, 3))])  # 3 * 4 configs
    exclude = {space.get(i) for i in range(len(space)) if i not in (4, 9)}
    out = run("ga", 5, exclude, Flat(), space=space)
    assert sorted(space.index(c) for c in out) == [4, 9]


def test_epsilon_mixes_model_picks_and_random_ones():
    oracle = Oracle()
    out = run("ga", 10, model=oracle, settings=dataclasses.replace(SearchSettings(), epsilon=1.0))
    assert len(set(out)) == 10 and oracle.batches == []
    out = run("ga", 10, model=Oracle(), settings=dataclasses.replace(SearchSettings(), epsilon=0.5))
    scores = [score(c) for c in out]
    assert len(set(out)) == 10 and min(scores[:5]) > np.median(scores[5:])


def test_evolve_is_deterministic_for_a_seed():
    def oracle_score(configs):
        return np.array([score(c) for c in configs])

    settings = SearchSettings(ga_generations=4, ga_population=32)
    first = evolve(SPACE, oracle_score, 8, set(), np.random.default_rng(5), settings)
    second = evolve(SPACE, oracle_score, 8, set(), np.random.default_rng(5), settings)
    assert first == second and all(isinstance(c, Config) for c in first)


# -- in the tuning loop ----------------------------------------------------------------------------

def test_tuning_loop_with_genetic_search_beats_random():
    """make_loop(search="ga"): XGBoost-guided evolution vs random search on a replayed timer."""
    from tensortune.settings import Settings
    from tensortune.space import task_space
    from tensortune.tuner import Evaluator, make_loop
    from tests.fakes import FakeBuilder, ReplayRunner
    from tests.test_tuner import TASK as MM_TASK
    from tests.test_tuner import synthetic_cost

    space = task_space(MM_TASK)
    search = SearchSettings(batch_size=16, ga_population=64, ga_generations=6)
    best = {}
    for tuner in ("random", "xgb"):
        costs = []
        for seed in range(2):
            settings = Settings(search=search, seed=seed)
            loop = make_loop(tuner, space, settings, "knob", search="ga")
            ev = Evaluator(MM_TASK, FakeBuilder(), ReplayRunner(synthetic_cost), budget=96)
            costs.append(loop.run(ev).best_cost)
        best[tuner] = float(np.mean(costs))
    assert best["xgb"] < best["random"] and best["xgb"] <= 1.5e-3
    with pytest.raises(ValueError, match="unknown search"):
        make_loop("xgb", space, Settings(), search="tabu")


def test_a_pretrained_model_guides_the_very_first_batch():
    """A model trained before the run (transfer) is used at once, not after a random batch."""
    from tensortune.settings import Settings
    from tensortune.space import task_space
    from tensortune.tuner import Evaluator, make_loop
    from tests.fakes import FakeBuilder, ReplayRunner
    from tests.test_tuner import TASK as MM_TASK
    from tests.test_tuner import synthetic_cost

    class Pretrained:
        trained = True

        def fit(self, inputs, results):
            pass

        def predict(self, inputs):
            return np.array([-synthetic_cost(i.config) for i in inputs])

    space = task_space(MM_TASK)
    settings = Settings(search=SearchSettings(batch_size=16, epsilon=0.0))
    firsts = {}
    for name, model in (("cold", None), ("pretrained", Pretrained())):
        loop = make_loop("xgb", space, settings, search="ga", model=model)
        ev = Evaluator(MM_TASK, FakeBuilder(), ReplayRunner(synthetic_cost), budget=16)
        loop.step(ev)
        firsts[name] = np.median([synthetic_cost(c) for c in ev.results])
    assert firsts["pretrained"] < 0.5 * firsts["cold"]
