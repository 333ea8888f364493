"""Knobs, configs and spaces: indexing, sampling, moves, JSON round trips."""
import json

import numpy as np
import pytest

from tensortune.space import ChoiceKnob, Config, ConfigSpace, InvalidConfigError, SplitKnob
from tensortune.space.knobs import factorizations


def small_space():
    return ConfigSpace([SplitKnob("tile_i", 12, 3), SplitKnob("tile_k", 8, 2, max_inner=4),
                        ChoiceKnob("unroll", (0, 16, 64)), ChoiceKnob("order", ("ab", "ba"))])


def test_factorizations_are_complete_and_exact():
    f = factorizations(12, 3)
    assert all(np.prod(t) == 12 for t in f)
    assert len(set(f)) == len(f) == 18  # ordered triples with product 2^2*3: C(4,2)*C(3,2)
    assert SplitKnob("k", 8, 2, max_inner=4).candidates == ((2, 4), (4, 2), (8, 1))


def test_index_config_round_trip_covers_space():
    space = small_space()
    assert len(space) == 18 * 3 * 3 * 2
    seen = set()
    for i in range(len(space)):
        cfg = space.get(i)
        assert space.index(cfg) == i
        seen.add(cfg)
    assert len(seen) == len(space)
    with pytest.raises(IndexError):
        space.get(len(space))


def test_config_is_frozen_hashable_and_json_round_trips():
    cfg = small_space().get(17)
    again = Config.from_json(json.loads(json.dumps(cfg.to_json())))
    assert again == cfg and hash(again) == hash(cfg)
    assert isinstance(again["tile_i"], tuple)
    with pytest.raises(TypeError):
        cfg["unroll"] = 3  # frozen


def test_foreign_configs_are_refused_by_name():
    space = small_space()
    good = dict(space.get(0))
    with pytest.raises(InvalidConfigError, match="tile_k"):
        space.index(Config({**good, "tile_k": (1, 8)}))  # inner 8 > max_inner
    with pytest.raises(InvalidConfigError, match="lacks knob 'order'"):
        space.index(Config({k: v for k, v in good.items() if k != "order"}))
    with pytest.raises(InvalidConfigError, match="unknown knob"):
        space.index(Config({**good, "extra": 1}))
    assert Config({**good, "unroll": 7}) not in space


def test_sampling_is_seeded_distinct_and_excludes():
    space = small_space()
    a = space.sample_many(20, np.random.default_rng(3))
    b = space.sample_many(20, np.random.default_rng(3))
    assert a == b and len(set(a)) == 20
    c = space.sample_many(20, np.random.default_rng(4), exclude=set(a))
    assert not set(c) & set(a)


def test_neighbor_changes_exactly_one_knob_and_stays_in_space():
    space = small_space()
    rng = np.random.default_rng(0)
    cfg = space.get(100)
    for _ in range(200):
        nxt = space.neighbor(cfg, rng)
        assert nxt in space
        changed = [k for k in cfg if cfg[k] != nxt[k]]
        assert len(changed) == 1
        cfg = nxt


def test_knob_vector_has_fixed_length():
    space = small_space()
    lengths = {space.knob_vector(space.get(i)).shape for i in range(0, len(space), 37)}
    assert lengths == {(3 + 2 + 1 + 1,)}
