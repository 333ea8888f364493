"""Roofline features: per-FLOP counts and port bounds derived from hardware rows, checked on a
hand-made row and on a compiled kernel whose work is known; sharing and storing the source."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensortune.features import ConcatFeatures, make_extractor
from tensortune.features import hardware_cpu, roofline
from tensortune.features.roofline import FEATURE_NAMES, PortModel, RooflineFeatures, roofline_rows
from tensortune.features.store import FeatureStore, fill
from tensortune.measure.types import MeasureInput, MeasureResult
from tensortune.space import Config, task_space
from tensortune.workload import Matmul, Task

# compiled for Zen 5 (AVX-512) whatever the host: features describe the target
MATMUL = Task(Matmul(m=16, n=16, k=16), {"kind": "llvm", "mcpu": "znver5", "num-cores": 2})
# i: 2 parallel x 2 x 1 x 4 (unrolled); j: 16 vectorized lanes; k: 4 x 4
VECTORIZED = Config(tile_i=(2, 2, 1, 4), tile_j=(1, 1, 1, 16), tile_k=(4, 4),
                    vector_axis="j", outer="S1/1", pack_A="none", pack_B="none", unroll=0)


def hw_row(**counts) -> np.ndarray:
    """A hardware row with the given raw values (counts as plain numbers, scaled here)."""
    row = np.zeros(len(hardware_cpu.FEATURE_NAMES), dtype=np.float32)
    for name, value in counts.items():
        i = hardware_cpu.FEATURE_NAMES.index(name)
        plain = name in ("invalid", "log_parallel", "parallel_balance")
        row[i] = value if plain else math.log2(1 + value)
    return row


def named(row) -> dict[str, float]:
    return dict(zip(FEATURE_NAMES, np.asarray(row).tolist()))


def test_counts_per_flop_and_the_binding_port():
    # 1024 FLOPs: 16 vector FMAs (2 pipes: 8 cycles), 48 vector loads (2 ports: 24 cycles),
    # 8 stores (8 cycles), 120 instructions in all (6 wide: 20 cycles): loads bind
    hw = hw_row(fma_vec=16, load_vec=48, store_vec=8, log_dynamic_instructions=120,
                log_parallel=0, parallel_balance=1.0)
    row = named(roofline_rows(hw, flops=1024, cores=2)[0])
    assert row["invalid"] == 0
    assert row["fma_vec_per_flop"] == pytest.approx(math.log2(17) - 10, abs=1e-5)
    assert row["fma_scalar_per_flop"] == roofline.ZERO_PER_FLOP  # never executed
    assert row["fp_cycles_per_flop"] == pytest.approx(math.log2(1 + 8) - 10, abs=1e-5)
    assert row["load_cycles_per_flop"] == pytest.approx(math.log2(1 + 24) - 10, abs=1e-5)
    assert row["issue_cycles_per_flop"] == pytest.approx(math.log2(1 + 20) - 10, abs=1e-5)
    assert row["bound_cycles_per_flop"] == row["load_cycles_per_flop"]
    assert roofline.RESOURCES[int(row["bound_resource"])] == "load"
    assert row["speedup"] == 1.0 and row["time_per_flop"] == row["bound_cycles_per_flop"]


def test_parallel_speedup_is_capped_by_cores_and_balance_and_ports_are_settable():
    hw = hw_row(fma_vec=4000, log_parallel=math.log2(3), parallel_balance=0.75)
    row = named(roofline_rows(hw, flops=2 ** 17, cores=2)[0])
    # 3 parallel iterations on 2 cores: 2 x 0.75 = 1.5x
    assert row["speedup"] == pytest.approx(1.5)
    assert row["time_per_flop"] == pytest.approx(math.log2(1 + 2000 / 1.5) - 17, abs=1e-5)
    one_pipe = named(roofline_rows(hw, 2 ** 17, 2, PortModel(fp=1.0))[0])
    assert one_pipe["fp_cycles_per_flop"] == pytest.approx(math.log2(1 + 4000) - 17, abs=1e-5)


def test_an_invalid_hardware_row_gives_an_invalid_zero_row():
    row = roofline_rows(hardware_cpu.invalid_row(), flops=1000, cores=2)[0]
    assert row[0] == 1 and not row[1:].any()


def test_a_compiled_vectorized_matmul_does_one_fma_lane_per_two_flops():
    ex = make_extractor("roofline")
    assert isinstance(ex, RooflineFeatures) and ex.dim == len(FEATURE_NAMES)
    row = named(ex.extract([MeasureInput(MATMUL, VECTORIZED)])[0])
    flops = MATMUL.workload.flops  # 2 * 16^3
    # 16^3 multiply-adds on 16 lanes: 256 vector FMAs, and the 2 parallel rows use both cores
    assert row["fma_vec_per_flop"] == pytest.approx(math.log2(257) - math.log2(flops), abs=1e-4)
    assert row["log_fp_lanes_per_flop"] == pytest.approx(0.0, abs=1e-3)
    assert row["speedup"] == 2.0
    assert row["time_per_flop"] < row["bound_cycles_per_flop"]


def test_make_extractor_shares_the_hardware_part_and_refuses_other_sources():
    both = make_extractor("itervar+hardware+roofline")
    assert isinstance(both, ConcatFeatures)
    _, hardware, derived = both.parts
    assert derived.hardware is hardware  # one compilation per candidate for both
    alone = make_extractor("roofline")
    assert alone.hardware.name == "hardware"
    with pytest.raises(ValueError, match="derives from the 'hardware' extractor"):
        RooflineFeatures(make_extractor("itervar"))


def test_a_feature_bank_derives_roofline_from_stored_hardware_rows(tmp_path):
    from tensortune.evaluation import FeatureBank
    from tensortune.dataset import TaskData, TaskInfo

    space = task_space(MATMUL)
    inputs = [MeasureInput(MATMUL, c) for c in (VECTORIZED, space.get(3), space.get(11))]
    data = TaskData(TaskInfo(MATMUL.key, "mm", "matmul", "records"), MATMUL, tuple(inputs),
                    tuple(MeasureResult(costs=(1e-5,)) for _ in inputs))
    store = FeatureStore(tmp_path)
    fill(store, "hardware", inputs[:2])
    bank = FeatureBank(FeatureStore(tmp_path, read_only=True))
    assert not bank.stored("roofline", data)  # its source lacks a row
    fill(store, "hardware", inputs[2:])
    bank = FeatureBank(FeatureStore(tmp_path, read_only=True))
    assert bank.stored("itervar+roofline", data)
    derived = bank.get("roofline")
    assert derived.hardware is bank.get("hardware")  # the stored one
    expected = roofline_rows(bank.get("hardware").extract(inputs), MATMUL.workload.flops, 2)
    np.testing.assert_array_equal(derived.extract(inputs), expected)
