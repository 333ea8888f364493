"""Tuna's per-block list scheduler on hand-written assembly whose schedule is known, and the
``ilp`` features of compiled candidates."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensortune.analysis import asm_cpu, asm_loops
from tensortune.analysis.list_schedule import (FEATURE_NAMES, GOLDEN_COVE, ZEN, code_weights,
                                               core_of, program_stats, schedule_block)
from tensortune.features import ConcatFeatures, HardwareCPUFeatures, make_extractor
from tensortune.features import hardware_cpu
from tensortune.features.ilp import IlpFeatures
from tensortune.features.store import FeatureStore
from tensortune.measure.types import MeasureInput
from tensortune.space import Config, task_space
from tensortune.workload import Matmul, Task

FMA = GOLDEN_COVE.units["fma"].latency
SPR, ZEN4 = core_of({"mcpu": "sapphirerapids"}), core_of({"mcpu": "znver4"})


def block(text: str):
    return [asm_cpu.parse_instruction(line.strip()) for line in text.strip().splitlines()]


def fmas(dests, width="ymm"):
    return block("\n".join(f"vfmadd231ps %{width}14, %{width}15, %{width}{d}" for d in dests))


# -- one block ------------------------------------------------------------------------------------
@pytest.mark.parametrize("core", [GOLDEN_COVE, ZEN])
def test_a_chain_of_dependent_fmas_takes_their_latencies(core):
    s = schedule_block(fmas([0, 0, 0, 0]), core)  # each accumulates into ymm0
    lat = core.units["fma"].latency
    assert s.issue == (0, lat, 2 * lat, 3 * lat)
    assert s.cycles == s.critical_path == 4 * lat
    assert s.throughput == 2.0  # two FMA ports: a latency-bound block, 8x over its port bound


@pytest.mark.parametrize("core", [GOLDEN_COVE, ZEN])
def test_independent_fmas_issue_two_a_cycle_on_two_fma_ports(core):
    s = schedule_block(fmas([0, 1, 2, 3]), core)
    assert s.issue == (0, 0, 1, 1)
    assert s.throughput == 2.0 and s.critical_path == FMA
    assert s.cycles == 1 + FMA  # the last pair issues a cycle later


def test_avx512_on_256_bit_pipes_holds_each_pipe_two_cycles():
    assert ZEN4.pipe_bits == 256 and SPR.pipe_bits == 512
    zen4 = schedule_block(fmas([0, 1, 2, 3], "zmm"), ZEN4)
    assert zen4.issue == (0, 0, 2, 2) and zen4.throughput == 4.0
    spr = schedule_block(fmas([0, 1, 2, 3], "zmm"), SPR)
    assert spr.issue == (0, 0, 1, 1) and spr.throughput == 2.0


@pytest.mark.parametrize("core", [GOLDEN_COVE, ZEN])
def test_a_load_feeding_an_fma_adds_the_load_latency_folded_or_not(core):
    load = core.units["vload"].latency
    explicit = schedule_block(block("vmovups (%rax), %ymm1\nvfmadd231ps %ymm1, %ymm2, %ymm0"), core)
    assert explicit.issue == (0, load) and explicit.cycles == load + FMA
    folded = schedule_block(block("vfmadd231ps (%rax), %ymm2, %ymm0"), core)
    assert folded.cycles == folded.critical_path == load + FMA
    # a load whose address comes from an integer add waits for it too
    addressed = schedule_block(block("addq $64, %rax\nvmovups (%rax), %ymm1"), core)
    assert addressed.issue == (0, 1)


def test_memory_stays_in_order_for_stores_and_spill_reloads():
    # Golden Cove has two store ports, yet the second store waits for the first
    assert schedule_block(block("vmovups %ymm0, (%rax)\nvmovups %ymm1, (%rbx)")).issue == (0, 1)
    # a store waits for an earlier load (addresses are not compared)...
    assert schedule_block(block("vmovups (%rdi), %ymm1\nvmovups %ymm2, (%rsi)")).issue == (0, 1)
    # ...but a load goes ahead of an earlier store elsewhere, not of one to its own address
    late = schedule_block(block("vmovups %ymm0, 8(%rsp)\nvmovups 8(%rsp), %ymm3"))
    early = schedule_block(block("vmovups %ymm0, 8(%rsp)\nvmovups 40(%rsp), %ymm3"))
    assert late.issue == (0, 1) and early.issue == (0, 0)
    # register moves and zero idioms start no chain: the FMAs do not wait on each other
    assert schedule_block(block("vxorps %ymm0, %ymm0, %ymm0\nvmovaps %ymm0, %ymm1\n"
                                "vfmadd231ps %ymm2, %ymm3, %ymm0\n"
                                "vfmadd231ps %ymm2, %ymm3, %ymm1")).critical_path == FMA


def test_loop_carried_recurrences_through_registers_and_memory():
    # one accumulator per pass: each pass waits for the previous one's FMA
    one = schedule_block(fmas([0]), carried=True)
    assert one.recurrence == FMA and one.throughput == 0.5  # one FMA on two ports
    # an accumulator kept in memory: load, FMA, store, then the next pass loads it again
    mem = block("vmovups (%rdi), %ymm0\nvfmadd231ps (%rsi,%rax), %ymm1, %ymm0\n"
                "vmovups %ymm0, (%rdi)\naddq $32, %rax")
    s = schedule_block(mem, carried=True)
    assert s.recurrence == GOLDEN_COVE.units["vload"].latency + FMA + 1
    # the same with a pointer that moves each pass carries nothing through memory
    moving = schedule_block(mem[:3] + block("addq $32, %rdi"), carried=True)
    assert moving.recurrence == 1  # the pointer increment alone
    assert schedule_block(fmas([0])).recurrence == 0  # not asked: straight-line code


# -- a program ------------------------------------------------------------------------------------
# 100 passes of a loop doing 4 independent FMAs (latency-bound: 4 accumulators, 2 ports), after a
# straight-line block of 2 dependent FMAs
PROGRAM = """
	.type	main_compute_,@function
main_compute_:
	vfmadd231ps	%ymm14, %ymm15, %ymm0
	vfmadd231ps	%ymm14, %ymm15, %ymm0
	xorl	%eax, %eax
.LBB0_1:
	vfmadd231ps	%ymm14, %ymm15, %ymm1
	vfmadd231ps	%ymm14, %ymm15, %ymm2
	vfmadd231ps	%ymm14, %ymm15, %ymm3
	vfmadd231ps	%ymm14, %ymm15, %ymm4
	incq	%rax
	cmpq	$100, %rax
	jne	.LBB0_1
	retq
"""


def test_program_sums_blocks_by_execution_count_and_finds_the_hot_loop():
    [func] = asm_cpu.parse_functions(PROGRAM)
    prog = asm_loops.program_of(func)
    loops, per_ins = code_weights(prog)
    assert len(loops) == 1 and loops[0].trip == 100
    total, hot = program_stats(prog, loops, per_ins, GOLDEN_COVE)
    head = schedule_block(prog.instructions[:3], GOLDEN_COVE)
    body = schedule_block(prog.instructions[3:10], GOLDEN_COVE, carried=True)
    assert head.cycles == 2 * FMA
    assert total["cycles"] == pytest.approx(head.cycles + 100 * body.cycles + 1)  # + retq
    assert total["instructions"] == 3 + 700 + 1
    # per pass: 4 FMA-port cycles over 2 ports, but each accumulator waits FMA cycles
    assert hot["throughput"] == pytest.approx(body.throughput) and body.throughput > 2 - 1e-9
    assert hot["recurrence"] == FMA and hot["pipelined"] == FMA
    assert 0.9 < hot["share"] < 1.0


# -- the extractor --------------------------------------------------------------------------------
ZEN5 = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}
MATMUL = Task(Matmul(m=16, n=16, k=16), ZEN5)
VECTORIZED = Config(tile_i=(2, 2, 1, 4), tile_j=(1, 1, 1, 16), tile_k=(4, 4), vector_axis="j",
                    outer="S1/1", pack_A="none", pack_B="none", unroll=0)


def test_hardware_plus_ilp_compiles_once_and_gives_sane_rows():
    both = make_extractor("hardware+ilp")
    assert isinstance(both, ConcatFeatures)
    hardware, ilp = both.parts
    assert isinstance(ilp, IlpFeatures) and ilp._compiler is hardware and hardware.ilp
    space = task_space(MATMUL)
    foreign = Config(**{**dict(VECTORIZED), "tile_i": (3, 1, 1, 1)})  # 3 does not divide 16
    inputs = [MeasureInput(MATMUL, c) for c in (VECTORIZED, space.get(7), space.get(1234),
                                                 foreign)]
    try:
        rows = both.extract(inputs)  # in a worker process: it must schedule there too
    finally:
        both.close()
    n_hw = len(hardware_cpu.FEATURE_NAMES)
    assert rows.shape == (4, n_hw + len(FEATURE_NAMES)) and np.isfinite(rows).all()
    # the hardware columns are what the hardware extractor alone gives
    plain = HardwareCPUFeatures(workers=0).extract(inputs)
    np.testing.assert_array_equal(rows[:, :n_hw], plain)
    ilp_rows = rows[:, n_hw:]
    # computed in this process, the ilp rows are the same
    np.testing.assert_array_equal(IlpFeatures(HardwareCPUFeatures(workers=0)).extract(inputs),
                                  ilp_rows)
    flops = MATMUL.workload.flops
    for r in ilp_rows[:3]:
        row = dict(zip(FEATURE_NAMES, r.tolist()))
        assert row["invalid"] == 0
        # a schedule is never shorter than its latency chains, and a pipelined loop never
        # slower than one pass after another
        assert row["cycles_per_flop"] >= row["critical_path_per_flop"] - 1e-5
        assert row["pipelined_per_flop"] <= row["cycles_per_flop"] + 1e-5
        assert 0.05 < row["ipc"] <= 6 and 0 < row["hot_share"] <= 1 and row["hot_ipc"] > 0
        assert -12 < row["cycles_per_flop"] < 4  # between 1/4096 and 16 cycles per FLOP
    # 16^3 multiply-adds as 256 16-lane FMAs on Zen 5's two FMA pipes: at least 128 cycles
    first = dict(zip(FEATURE_NAMES, ilp_rows[0].tolist()))
    assert first["throughput_per_flop"] >= math.log2(128) - math.log2(flops) - 1e-4
    assert ilp_rows[3][0] == 1 and not ilp_rows[3][1:].any()  # the invalid config


def test_ilp_derives_from_the_extractor_a_feature_store_wraps(tmp_path):
    stored = FeatureStore(tmp_path).wrap(HardwareCPUFeatures(workers=0))
    ilp = IlpFeatures(stored)
    assert ilp.hardware is stored and ilp._compiler is stored.inner and stored.inner.ilp
    assert make_extractor("ilp").dim == len(FEATURE_NAMES)
    assert ilp.extract([]).shape == (0, len(FEATURE_NAMES))
    with pytest.raises(ValueError, match="derives from the 'hardware' extractor"):
        IlpFeatures(make_extractor("itervar"))
