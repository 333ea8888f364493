"""Hardware features: assembly and PTX parsing on hand-written snippets, loop mapping, and
dynamic instruction counts of compiled kernels checked against the work they must do."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensortune.analysis import asm_cpu, asm_loops, ptx
from tensortune.analysis.cfg import CodeLoop
from tensortune.analysis.loop_map import (IRLoop, load_use_histogram, loop_trips, map_loops,
                                          parallel_split)
from tensortune.features import HardwareCPUFeatures, HardwareCUDAFeatures, make_extractor
from tensortune.features import hardware_cpu, hardware_cuda
from tensortune.measure.types import MeasureInput
from tensortune.space import Config, task_space
from tensortune.workload import Matmul, Task, default_target

# an outer loop of 4 (counted up in %rcx) around an inner loop of 16 (%rax from -1024 by 64)
# doing 3 FMAs, 2 loads and a stack store; the backward ``je`` goes to an exit stub, no loop
NESTED = """
	.text
	.type	main_compute_,@function
main_compute_:
	subq	$72, %rsp
	xorl	%ecx, %ecx
	testq	%rdi, %rdi
	jne	.LBB0_1
.LBB0_5:
	movl	$-1, %eax
	addq	$72, %rsp
	retq
.LBB0_1:
	movq	$-1024, %rax
	vxorps	%xmm0, %xmm0, %xmm0
.LBB0_2:
	vmovups	1024(%rsi,%rax), %zmm1
	vbroadcastss	(%rdx), %zmm2
	vfmadd231ps	%zmm1, %zmm2, %zmm0
	vfmadd231ps	64(%rsi,%rax), %zmm2, %zmm3
	vfmadd231ps	%zmm1, %zmm1, %zmm4
	vmovups	%zmm4, 8(%rsp)
	addq	$64, %rax
	jne	.LBB0_2
	vmovups	%zmm0, (%r8)
	testq	%r9, %r9
	je	.LBB0_5
	incq	%rcx
	cmpq	$4, %rcx
	jne	.LBB0_1
	addq	$72, %rsp
	retq
.Lfunc_end0:
	.size	main_compute_, .Lfunc_end0-main_compute_
"""

# a loop of 8 with an if/else: each arm's FMA runs half of the iterations
DIAMOND = """
	.type	main_compute_,@function
main_compute_:
	xorl	%ecx, %ecx
.LBB1_1:
	testq	%rdi, %rdi
	je	.LBB1_3
	vfmadd231ss	%xmm1, %xmm2, %xmm0
	jmp	.LBB1_4
.LBB1_3:
	vfmadd231ss	%xmm1, %xmm3, %xmm0
.LBB1_4:
	incq	%rcx
	cmpq	$8, %rcx
	jne	.LBB1_1
	retq
"""

KERNEL_PTX = """
.visible .entry main_kernel(
	.param .u64 main_kernel_param_0,
	.param .u64 main_kernel_param_1
)
.maxntid 64, 1, 1
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<8>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<8>;
	.shared .align 4 .b8 _ZZ11main_kernelE12A_shared_ptr[256];

	ld.param.u64 	%rd1, [main_kernel_param_0];
	ld.param.u64 	%rd2, [main_kernel_param_1];
	cvta.to.global.u64 	%rd3, %rd1;
	mov.u32 	%r2, _ZZ11main_kernelE12A_shared_ptr;
	mov.f32 	%f1, 0f00000000;
	mov.u32 	%r5, 0;
$L__BB0_1:
	bar.sync 	0;
	ld.global.nc.f32 	%f2, [%rd3];
	st.shared.f32 	[%r2], %f2;
	bar.sync 	0;
	ld.shared.v2.f32 	{%f3, %f4}, [%r2];
	add.s64 	%rd3, %rd3, 64;
	fma.rn.f32 	%f1, %f3, %f4, %f1;
	fma.rn.f32 	%f1, %f4, %f4, %f1;
	add.s32 	%r5, %r5, 1;
	setp.ne.s32 	%p1, %r5, 16;
	@%p1 bra 	$L__BB0_1;
	cvta.to.global.u64 	%rd4, %rd2;
	st.global.f32 	[%rd4], %f1;
	ret;
}
"""

PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'main_kernel' for 'sm_90'
ptxas info    : Function properties for main_kernel
    8 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 43 registers, used 1 barriers, 768 bytes smem
ptxas info    : Compile time = 9.938 ms
ptxas info    : Compiling entry function 'copy_kernel' for 'sm_90'
ptxas info    : Function properties for copy_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, 360 bytes cmem[0]
"""

# features describe the target, not the host: these kernels are compiled, never run, for a
# Zen 5 (AVX-512) target whatever machine the tests are on
ZEN5 = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}
CPU_MATMUL = Task(Matmul(m=16, n=16, k=16), ZEN5)
# i: 2 parallel x 2 x 1 x 4 (unrolled); j: 16 vectorized lanes; k: 4 x 4
CPU_VECTORIZED = Config(tile_i=(2, 2, 1, 4), tile_j=(1, 1, 1, 16), tile_k=(4, 4),
                        vector_axis="j", outer="S1/1", pack_A="none", pack_B="none", unroll=0)
CUDA = {"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}}
CUDA_MATMUL = Task(Matmul(m=16, n=16, k=16), CUDA, template="cuda.generic")
# 2 blocks of 64 threads, 2 virtual threads each; A (8x4) and B (4x16) staged: 384 bytes
CUDA_CONFIG = Config(tile_i=(2, 1, 8, 1), tile_j=(1, 2, 8, 1), tile_k=(4, 4), unroll=0,
                     unroll_explicit=0)


def single(text: str) -> asm_loops.AsmProgram:
    [func] = asm_cpu.parse_functions(text)
    return asm_loops.program_of(func)


def named(row: np.ndarray, names) -> dict[str, float]:
    assert row.shape == (len(names),)
    return dict(zip(names, row.tolist()))


# -- x86 assembly ---------------------------------------------------------------------------------
def test_parses_functions_labels_operands_and_classes():
    [func] = asm_cpu.parse_functions(NESTED)
    assert func.name == "main_compute_" and len(func.instructions) == 25
    assert func.labels[".LBB0_5"] == 4 and func.labels[".LBB0_2"] == 9
    fma = func.instructions[12]
    assert fma.operands == ("64(%rsi,%rax)", "%zmm2", "%zmm3")
    assert asm_cpu.classify(fma) == asm_cpu.InsClass("fma", True, 512, 4)
    assert asm_cpu.reads(fma) == {"rsi", "rax", "v2", "v3"} and asm_cpu.writes(fma) == {"v3"}
    kinds = {asm_cpu.parse_instruction(line).mnemonic: asm_cpu.classify(
        asm_cpu.parse_instruction(line)) for line in (
            "vmovups %zmm4, 8(%rsp)", "vfmadd231ss %xmm1, %xmm2, %xmm0",
            "vpermt2ps %zmm1, %zmm2, %zmm3", "vaddpd %ymm1, %ymm2, %ymm3", "jne .LBB0_2",
            "leaq 8(%rsp), %rsi")}
    assert kinds["vmovups"].cls == "store" and kinds["vmovups"].vector
    assert kinds["vfmadd231ss"] == asm_cpu.InsClass("fma", False, 128, 4)  # scalar in an xmm
    assert kinds["vpermt2ps"].cls == "shuffle" and kinds["vaddpd"].bits == 256
    assert kinds["jne"].cls == "branch" and kinds["leaq"].cls == "int"
    assert asm_cpu.lanes(kinds["vaddpd"]) == 4 and asm_cpu.register_family("%r8d") == "r8"


def test_loops_nest_with_trip_counts_and_exit_stubs_are_not_loops():
    prog = single(NESTED)
    forest = asm_loops.find_loops(prog)
    outer, inner = forest.loops
    assert (outer.parent, inner.parent, outer.depth, inner.depth) == (-1, 0, 0, 1)
    assert (outer.trip, inner.trip) == (4, 16)
    assert inner.body < outer.body and outer.compute and inner.compute
    # the exit stub (.LBB0_5) is outside both loops and runs at most once
    assert 4 not in outer.body and forest.frequency[4] <= 1


def test_dynamic_counts_multiply_static_counts_by_mapped_trip_counts():
    ir = [IRLoop("i", 4, "serial", 0, -1, compute=True), IRLoop("k", 16, "serial", 1, 0, True)]
    prof = hardware_cpu.profile(single(NESTED), ir)
    assert prof.counts["fma_vec"] == 3 * 16 * 4
    assert prof.counts["load_vec"] == 2 * 16 * 4  # the folded FMA operand counts as an FMA
    assert prof.counts["store_vec"] == 16 * 4 + 4
    assert prof.spill_stores == 16 * 4 and prof.stack_bytes == 72
    assert prof.vector_bits == 512 and prof.vector_fraction == 1.0
    assert prof.mapped == 2 and prof.fp_lanes == 2 * 16 * 3 * 16 * 4


def test_if_else_arms_each_count_half_of_the_iterations():
    prog = single(DIAMOND)
    [loop] = asm_loops.find_loops(prog).loops
    assert loop.trip == 8
    prof = hardware_cpu.profile(prog, [IRLoop("k", 8, "serial", 0, -1, compute=True)])
    assert prof.counts["fma_scalar"] == 8 and prof.vector_bits == 0


def test_load_to_use_distances_and_histogram():
    prog = single(NESTED)
    inner = asm_loops.find_loops(prog).loops[1]
    # vmovups -> its FMA two instructions on, vbroadcastss -> the next one, a folded operand: 0
    assert sorted(asm_cpu.load_use_distances(prog.instructions, inner.body)) == [0, 1, 2]
    hist = load_use_histogram([(0, 1.0), (1, 1.0), (2, 2.0), (7, 4.0), (40, 0.0)])
    np.testing.assert_allclose(hist, [0.125, 0.125, 0.25, 0, 0.5, 0, 0])
    assert hardware_cpu.profile(prog, []).load_use[:3].tolist() == pytest.approx([1 / 3] * 3)


def test_mapping_follows_ir_order_nesting_trip_counts_and_unrolling():
    # IR: i(4) { copy(64) ; k(16) { j(8) } }; the copy loop was fully unrolled by the compiler
    ir = [IRLoop("i", 4, "serial", 0, -1, True), IRLoop("copy", 64, "serial", 1, 0, False),
          IRLoop("k", 16, "serial", 1, 0, True), IRLoop("j", 8, "serial", 2, 2, True)]
    body = frozenset
    code = [CodeLoop(body(range(0, 100)), 0, -1, 0, compute=True),                # trip unknown
            CodeLoop(body(range(10, 90)), 10, 0, 1, trip=4, compute=True),        # k unrolled 4x
            CodeLoop(body(range(20, 30)), 20, 1, 2, trip=8, compute=True)]
    mapping = map_loops(code, ir)
    assert mapping == [0, 2, 3]
    assert loop_trips(code, ir, mapping) == [4, 4, 8]
    # 10 parallel iterations on 4 threads run in chunks of 3, 3, 3 and 1; unrolled twice, the
    # main loop runs once in each of the first three and the remainder loop once in each
    assert parallel_split(10, 4, 2) == (3, 4)


def test_a_row_that_counts_too_little_work_is_scaled_up_to_the_workload():
    names = hardware_cpu.FEATURE_NAMES
    row = np.zeros(len(names), dtype=np.float32)
    row[names.index("fp_work_ratio")] = 0.25  # the map found a quarter of the FLOPs
    row[names.index("fma_vec")] = math.log2(1 + 1000)
    row[names.index("log_dynamic_instructions")] = math.log2(1 + 8000)
    row[names.index("spill_loads")] = 0.0  # no spills: none are made up
    row[names.index("mapped_fraction")] = 0.5
    out = hardware_cpu.cover_workload(row)
    assert out[names.index("fma_vec")] == pytest.approx(math.log2(1 + 4000))
    assert out[names.index("log_dynamic_instructions")] == pytest.approx(math.log2(1 + 32000))
    assert out[names.index("spill_loads")] == 0.0
    # what the map found stays visible; static facts are not counts
    assert out[names.index("fp_work_ratio")] == 0.25 and out[names.index("mapped_fraction")] == 0.5
    for ratio in (0.0, 0.5, 2.0):  # nothing counted (no FP at all), or enough: unchanged
        row[names.index("fp_work_ratio")] = ratio
        np.testing.assert_array_equal(hardware_cpu.cover_workload(row), row)
    np.testing.assert_array_equal(hardware_cpu.cover_workload(hardware_cpu.invalid_row()),
                                  hardware_cpu.invalid_row())


# -- compiled CPU kernels -------------------------------------------------------------------------
def cpu_profile(task: Task, config: Config) -> hardware_cpu.CPUProfile:
    import tvm

    from tensortune.space import apply_config

    sch = apply_config(task, config)
    ir = hardware_cpu.module_ir_loops(hardware_cpu.lower_cpu(sch.mod, task.tvm_target()))
    asm = tvm.compile(sch.mod, target=task.tvm_target()).mod.inspect_source("asm")
    return hardware_cpu.profile(hardware_cpu.asm_program(asm), ir, 2)


@pytest.mark.parametrize("mcpu,bits", [("znver5", 512), ("znver3", 256)])
def test_fma_count_of_a_vectorized_16_cubed_matmul_is_mnk_over_lanes(mcpu, bits):
    task = Task(CPU_MATMUL.workload, {**ZEN5, "mcpu": mcpu})
    prof = cpu_profile(task, CPU_VECTORIZED)
    lanes = bits // 32  # AVX-512 (Zen 5) or AVX2 (Zen 3): 16 lanes split into two ymm FMAs
    assert prof.vector_bits == bits
    assert prof.counts["fma_vec"] * lanes == 16 * 16 * 16 and prof.counts["fma_scalar"] == 0
    assert prof.fp_lanes == task.workload.flops and prof.mapped == prof.n_loops


def test_a_dot_product_stays_scalar():
    # a single floating-point reduction: LLVM may not reorder it, so no vectors
    task = Task(Matmul(m=1, n=1, k=64), default_target())
    prof = cpu_profile(task, task_space(task).get(0))
    assert prof.vector_bits == 0 and prof.vector_fraction == 0.0
    assert prof.counts["fma_scalar"] == 64 and prof.counts["fma_vec"] == 0


def test_cpu_extractor_rows_have_one_width_and_flag_invalid_configs():
    ex = make_extractor("hardware")
    assert isinstance(ex, HardwareCPUFeatures) and ex.name == "hardware"
    space = task_space(CPU_MATMUL)
    foreign = Config(**{**dict(CPU_VECTORIZED), "tile_i": (3, 1, 1, 1)})  # 3 does not divide 16
    configs = [CPU_VECTORIZED, space.get(7), space.get(1234), foreign]
    rows = ex.extract([MeasureInput(CPU_MATMUL, c) for c in configs])
    assert rows.shape == (4, len(hardware_cpu.FEATURE_NAMES)) and rows.dtype == np.float32
    assert ex.empty_dim() == rows.shape[1]
    row = named(rows[0], hardware_cpu.FEATURE_NAMES)
    assert row["invalid"] == 0 and row["vector_bits"] == 512 and row["log_parallel"] == 1
    assert row["fma_vec"] == pytest.approx(math.log2(1 + 256))
    assert row["fp_work_ratio"] == pytest.approx(1.0)
    assert sum(row[n] for n in hardware_cpu.LOAD_USE_NAMES) == pytest.approx(1.0)
    bad = named(rows[3], hardware_cpu.FEATURE_NAMES)
    assert bad["invalid"] == 1 and sum(abs(v) for v in bad.values()) == 1
    again = ex.extract([MeasureInput(CPU_MATMUL, CPU_VECTORIZED)])
    np.testing.assert_array_equal(again[0], rows[0])


# -- PTX and ptxas --------------------------------------------------------------------------------
def test_rows_computed_in_workers_match_and_an_overrun_gives_an_invalid_row():
    inputs = [MeasureInput(CPU_MATMUL, c) for c in (CPU_VECTORIZED, task_space(CPU_MATMUL).get(7))]
    isolated = HardwareCPUFeatures(workers=1, timeout_s=60)
    try:
        np.testing.assert_array_equal(isolated.extract(inputs),
                                      HardwareCPUFeatures(workers=0).extract(inputs))
    finally:
        isolated.close()
    hasty = HardwareCPUFeatures(workers=1, timeout_s=0.001)  # no compile finishes this fast
    try:
        rows = hasty.extract(inputs[:1])
    finally:
        hasty.close()
    row = named(rows[0], hardware_cpu.FEATURE_NAMES)
    assert row["invalid"] == 1 and row["log_dynamic_instructions"] == 0


def test_ptxas_report_per_kernel():
    info = ptx.parse_ptxas(PTXAS)
    assert info["main_kernel"] == ptx.PtxasInfo(registers=43, stack_frame=8, spill_stores=8,
                                                 spill_loads=12, shared_bytes=768, barriers=1)
    assert info["copy_kernel"] == ptx.PtxasInfo(registers=8)


def test_ptx_loop_trip_count_classes_and_load_to_use():
    [kernel] = ptx.parse_ptx(KERNEL_PTX)
    assert kernel.name == "main_kernel" and kernel.max_threads == 64
    assert kernel.shared_bytes == 256 and kernel.labels["$L__BB0_1"] == 6
    [loop] = ptx.find_loops(kernel).loops
    assert loop.trip == 16 and loop.compute
    ld = kernel.instructions[10]
    assert ld.writes == ("%f3", "%f4") and ptx.classify(ld) == "ld.shared"
    assert kernel.instructions[-2].reads == ("%rd4", "%f1")
    assert ptx.load_use_distances(kernel.instructions, loop.body) == [1, 2]
    ir = [IRLoop("k_0", 16, "serial", 0, -1, compute=True)]
    prof = hardware_cuda.kernel_profile(kernel, ir, 64, 4, ptx.PtxasInfo(registers=32))
    per_thread = prof.per_thread
    assert per_thread["fma"] == 32 and per_thread["ld.global"] == 16
    assert per_thread["st.shared"] == 16 and per_thread["bar"] == 32
    assert per_thread["st.global"] == 1 and per_thread["branch"] == 16
    assert prof.total["fma"] == 32 * 64 * 4


def test_occupancy_is_limited_by_registers_threads_or_shared_memory():
    spec = hardware_cuda.GPUSpec()
    # 64 registers x 256 threads = 16384 per block: 4 blocks fill the 65536 registers of an SM
    assert hardware_cuda.blocks_per_sm(256, ptx.PtxasInfo(registers=64), spec) == 4
    assert hardware_cuda.blocks_per_sm(1024, ptx.PtxasInfo(registers=16), spec) == 2
    shared = ptx.PtxasInfo(registers=16, shared_bytes=100 * 1024)
    assert hardware_cuda.blocks_per_sm(64, shared, spec) == 2


# -- compiled CUDA kernels (nvcc, no GPU) ---------------------------------------------------------
def test_cuda_fma_count_is_mnk_and_ptxas_resources_are_read():
    ex = make_extractor("hardware_cuda")
    assert isinstance(ex, HardwareCUDAFeatures) and ex.name == "hardware_cuda"
    [row] = ex.extract([MeasureInput(CUDA_MATMUL, CUDA_CONFIG)])
    row = named(row, hardware_cuda.FEATURE_NAMES)
    assert row["invalid"] == 0 and row["nvcc_failed"] == 0
    assert row["dyn_fma"] == pytest.approx(math.log2(1 + 16 * 16 * 16))
    assert row["log_threads"] == 6 and row["log_blocks"] == 1 and row["warps"] == 2
    assert row["log_shared_bytes"] == pytest.approx(math.log2(1 + 384))
    assert row["registers"] > 0 and row["barriers"] >= 1 and 0 < row["occupancy"] <= 1
    assert row["dyn_ld.shared"] > 0 and row["dyn_st.shared"] > 0 and row["dyn_bar"] > 0


def test_cuda_rows_flag_invalid_configs_and_nvcc_failures():
    bad = Config(**{**dict(CUDA_CONFIG), "tile_i": (1, 16, 1, 1)})  # 32 virtual threads
    ex = HardwareCUDAFeatures()
    rows = ex.extract([MeasureInput(CUDA_MATMUL, bad), MeasureInput(CUDA_MATMUL, Config(x=1))])
    names = hardware_cuda.FEATURE_NAMES
    for r in rows:
        r = named(r, names)
        assert r["invalid"] == 1 and sum(abs(v) for v in r.values()) == 1
    broken = HardwareCUDAFeatures(nvcc="/nonexistent/nvcc")
    [row] = broken.extract([MeasureInput(CUDA_MATMUL, CUDA_CONFIG)])
    row = named(row, names)
    assert row["nvcc_failed"] == 1 and sum(abs(v) for v in row.values()) == 1
