"""Cache features: Tuna's data-movement model on hand-made nests, and on a scheduled matmul whose
traffic at a cache that holds everything (or nothing) is known."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensortune.features import CacheFeatures, make_extractor
from tensortune.features.cache import (FEATURE_NAMES, LEVELS, CacheHierarchy, data_movement,
                                       hierarchy_of)
from tensortune.measure.types import MeasureInput
from tensortune.space import Config
from tensortune.workload import Matmul, Task

# loop i (4 iterations) around loop k (8); buffer 0 moves with i and k, buffer 1 with k only
EXTENTS = [4, 8]
FOOTPRINTS = np.array([[16.0 * 8, 32.0],   # loops i and k: 4 x 8 elements of 0, 8 of 1
                       [4.0 * 8, 32.0],    # loop k alone
                       [4.0, 4.0]])        # one iteration: one 4-byte element each


def task(cores: int) -> Task:
    return Task(Matmul(m=64, n=64, k=64), {"kind": "llvm", "mcpu": "znver5", "num-cores": cores})


# i: 8 parallel x 4 x 1 x 2; j: 4 parallel x 1 x 1 x 16 (vectorized); k: 8 x 8
CONFIG = Config(tile_i=(8, 4, 1, 2), tile_j=(4, 1, 1, 16), tile_k=(8, 8), vector_axis="j",
                outer="S1/1", pack_A="none", pack_B="none", unroll=0)
FLOPS = 2 * 64 ** 3
HUGE = CacheHierarchy(l1=1 << 30, l2=1 << 30, l3=1 << 30)


def named(row) -> dict[str, float]:
    assert len(row) == len(FEATURE_NAMES)
    return dict(zip(FEATURE_NAMES, np.asarray(row).tolist()))


def test_everything_fits_so_each_buffer_moves_its_footprint_once():
    assert data_movement(EXTENTS, FOOTPRINTS, capacity=1000).tolist() == [128, 32]


def test_an_overflowing_iteration_loses_reuse_for_that_loop_and_all_outside_it():
    # one k iteration (8 bytes) fits in 40, one i iteration (64 bytes) does not: buffer 1 is
    # reloaded every i iteration, buffer 0 is never reused anyway
    assert data_movement(EXTENTS, FOOTPRINTS, capacity=40).tolist() == [128, 128]
    # nothing fits: every access of every iteration misses
    assert data_movement(EXTENTS, FOOTPRINTS, capacity=6).tolist() == [4 * 4 * 8, 4 * 4 * 8]


def test_private_caches_give_no_reuse_across_the_split_loop():
    assert data_movement(EXTENTS, FOOTPRINTS, capacity=1000, private_from=0).tolist() == [128, 128]
    # inside the split loop, reuse is as before
    assert data_movement(EXTENTS, FOOTPRINTS, capacity=40, private_from=0).tolist() == [128, 128]


def test_huge_and_tiny_caches_bound_a_real_schedule():
    inp = MeasureInput(task(1), CONFIG)
    huge = named(CacheFeatures(HUGE).extract([inp])[0])
    tiny = named(CacheFeatures(CacheHierarchy(l1=1, l2=1, l3=1)).extract([inp])[0])
    assert huge["applied"] == tiny["applied"] == 1
    # everything fits: A, B and C once (16 KiB each) ...
    args = 3 * 64 * 64 * 4
    assert huge["compulsory_bytes_per_flop"] == pytest.approx(math.log2(args / FLOPS), abs=1e-5)
    for lv in LEVELS:
        # ... and the accumulator tile, its initialisation and write-back, each touched once
        assert huge[f"{lv}_B1_bytes_per_flop"] == pytest.approx(math.log2(64 * 64 * 4 / FLOPS),
                                                               abs=1e-5)  # A
        assert huge[f"{lv}_B2_bytes_per_flop"] == pytest.approx(math.log2(64 * 64 * 4 / FLOPS),
                                                               abs=1e-5)  # B
        assert huge[f"{lv}_bytes_per_flop"] >= huge["compulsory_bytes_per_flop"]
    # nothing fits: the update reads A and B and updates the accumulator on every iteration
    for b in range(3):
        assert tiny[f"l1_B{b}_bytes_per_flop"] == pytest.approx(math.log2(64 ** 3 * 4 / FLOPS),
                                                                abs=1e-5)
    assert tiny["l1_bytes_per_flop"] > huge["l1_bytes_per_flop"] + 3
    # the binding level is the slowest to refill: DRAM, refilling the last level
    assert LEVELS[int(tiny["binding_level"])] == "l3"
    assert tiny["memory_cycles_per_flop"] == tiny["l3_cycles_per_flop"]


def test_each_core_loads_what_the_parallel_loop_shares():
    one = named(CacheFeatures(HUGE).extract([MeasureInput(task(1), CONFIG)])[0])
    two = named(CacheFeatures(HUGE).extract([MeasureInput(task(2), CONFIG)])[0])
    # the fused parallel loop walks (i0, j0); each core reads the rows of A and the columns of B
    # its half of the tiles needs, so shared data is loaded by both cores
    assert two["l1_B1_bytes_per_flop"] + two["l1_B2_bytes_per_flop"] > \
        one["l1_B1_bytes_per_flop"] + one["l1_B2_bytes_per_flop"]
    assert two["l1_B0_bytes_per_flop"] == pytest.approx(one["l1_B0_bytes_per_flop"], abs=1e-5)


def test_hierarchies_come_from_the_target_and_invalid_configs_give_a_zero_row():
    assert hierarchy_of({"mcpu": "znver3"}).l2 == 512 * 1024
    assert hierarchy_of({"mcpu": "sapphirerapids"}).l2 == 2 << 20
    assert hierarchy_of({"kind": "llvm"}) == CacheHierarchy()
    ex = make_extractor("itervar+cache")
    # a 64 x 64 register tile: over the template's limit
    bad = Config({**CONFIG.to_json(), "tile_i": (1, 1, 1, 64), "tile_j": (1, 1, 1, 64)})
    rows = ex.extract([MeasureInput(task(2), bad)])
    assert rows.shape[1] == ex.parts[0].dim + len(FEATURE_NAMES)
    assert not rows[0, -len(FEATURE_NAMES):].any()
