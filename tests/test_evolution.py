"""Evolution strategies (Tuna's search) on a synthetic space with an oracle model."""
from __future__ import annotations

import numpy as np
import pytest

from tensortune.search import STRATEGIES
from tensortune.settings import SearchSettings
from tests.test_search import BEST, SPACE, TASK, Flat, Oracle, score


def run(n, exclude=frozenset(), model=None, seed=0, settings=SearchSettings(), seeds=()):
    return STRATEGIES["es"](SPACE, model, TASK, n, exclude, np.random.default_rng(seed), settings,
                            seeds=seeds)


@pytest.mark.parametrize("model", [None, Flat(), Oracle()])
def test_returns_n_distinct_unexplored_configs(model):
    exclude = set(SPACE.sample_many(200, np.random.default_rng(7)))
    out = run(24, exclude, model)
    assert len(out) == 24 and len(set(out)) == 24
    assert not set(out) & exclude
    assert all(c in SPACE for c in out)


def test_es_with_oracle_finds_top_percent_where_random_does_not():
    reference = np.array([score(c) for c in SPACE.sample_many(20_000, np.random.default_rng(99))])
    top1 = np.quantile(reference, 0.99)
    n = 32
    found = [score(c) for c in run(n, model=Oracle(), settings=SearchSettings(epsilon=0.0))]
    sampled = [score(c) for c in STRATEGIES["random"](SPACE, None, TASK, n, frozenset(),
                                                       np.random.default_rng(0),
                                                       SearchSettings())]
    assert max(found) >= top1
    assert sum(s >= top1 for s in found) >= n // 2
    assert np.median(found) > max(sampled)
    assert found == sorted(found, reverse=True)


def test_one_predict_per_generation_and_more_generations_help():
    means = {}
    for generations in (0, 15):
        oracle = Oracle()
        settings = SearchSettings(epsilon=0.0, es_generations=generations, es_starts=4,
                                  es_population=16)
        out = run(8, model=oracle, settings=settings, seed=1)
        means[generations] = np.mean([score(c) for c in out])
        assert len(oracle.batches) == 1 + generations  # every start's population in one call
        assert max(oracle.batches) <= 4 * 16
    assert means[15] > means[0]


def test_starts_from_seeds():
    settings = SearchSettings(epsilon=0.0, es_generations=2, es_starts=2, es_population=4)
    assert run(1, model=Oracle(), settings=settings, seeds=[BEST]) == [BEST]
