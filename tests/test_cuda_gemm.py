"""The CUDA GEMM template without a GPU: spaces, seeds that build to sm_90 cubins with launch
specs, the limits it refuses, vectorized and pipelined kernels, and results checked against
numpy on the CPU emulator of ``benchmarks/cuda_emulator.py``."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tensortune.measure import LocalBuilder, MeasureInput
from tensortune.measure.cuda_build import launch_spec
from tensortune.space import (Config, InvalidConfigError, TemplateMismatch, apply_config,
                              is_gemm, task_seeds, task_space, template_for)
from tensortune.space.cuda_gemm import K_PARTS, PIPELINES
from tensortune.workload import BatchMatmul, Conv2d, Dense, Matmul, PrimFuncWorkload, Task

CUDA = {"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}}
WORKLOADS = {
    "matmul_512": Matmul(m=512, n=512, k=512),
    "dense_bert": Dense(batch=128, in_features=768, out_features=3072),
    "batch_matmul": BatchMatmul(b=12, m=128, n=128, k=64),
    "matmul_odd": Matmul(m=200, n=120, k=72),
    "dense_odd": Dense(batch=37, in_features=200, out_features=24),
}
SMALL_DENSE = Dense(batch=64, in_features=64, out_features=128, bias=True)
# 64x64 tile: 2 x 16 threads x 2 rows along M (2 virtual threads), 8 x 8 threads x 4 columns
# along N; K tiles of 16: two of them, so every pipeline has something to overlap
SMALL_TILES = {"tile_i": (1, 2, 16, 2), "tile_j": (2, 2, 8, 4), "tile_k": (4, 16),
               "k_parts": "none"}


def gemm(workload) -> Task:
    return Task(workload, CUDA, template="cuda.gemm")


def cuda_source(task: Task, config: Config) -> str:
    import tvm

    module = tvm.compile(apply_config(task, config).mod, target=task.tvm_target())
    return module.mod.imports[0].inspect_source("cuda")


@pytest.fixture(scope="module")
def builder():
    with LocalBuilder(2, 300) as b:
        yield b


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_space_has_three_splits_and_three_choices(name):
    space = task_space(gemm(WORKLOADS[name]))
    knobs = {k.name: k for k in space.knobs}
    # the batch axis of batch_matmul goes to blockIdx.z: no knob
    assert list(knobs) == ["tile_i", "tile_j", "tile_k", "pipeline", "transpose", "pad",
                           "k_parts"]
    assert knobs["tile_i"].parts == knobs["tile_j"].parts == 4 and knobs["tile_k"].parts == 2
    assert knobs["pipeline"].options == PIPELINES
    assert space.size > 10_000


def test_every_seed_builds_an_sm90_cubin_with_its_launch_spec(builder):
    inputs = []
    for name, workload in WORKLOADS.items():
        task = gemm(workload)
        seeds = task_seeds(task)
        assert len(seeds) >= 8, name
        assert len({c["pipeline"] for c in seeds}) >= 2, name  # not one pipeline only
        inputs += [MeasureInput(task, c) for c in seeds]
    builds = builder.build(inputs)
    for inp, build in zip(inputs, builds):
        assert build.error.value == "none", (inp.task.workload.describe(), dict(inp.config),
                                             build.message)
        with open(build.path, "rb") as f:
            assert f.read(4) == b"\x7fELF"
        kernel, *sums = launch_spec(build.path)["kernels"]  # a split K: and the sum's
        c, w = inp.config, inp.task.workload
        # the extents the tiles split: a ragged axis (dense_odd's 37 rows) padded to 48
        knobs = {k.name: k for k in task_space(inp.task).knobs}
        m, n = knobs["tile_i"].extent, knobs["tile_j"].extent
        block_m, block_n = np.prod(c["tile_i"][1:]), np.prod(c["tile_j"][1:])
        # N blocks on x, M blocks on y, the batch on z; threads: N on x, M on y, K slices on z
        slices, splits = K_PARTS[c["k_parts"]]
        assert kernel["grid"] == [n // block_n, m // block_m, getattr(w, "b", 1) * splits]
        assert len(sums) == (splits > 1)
        assert kernel["block"] == [c["tile_j"][2], c["tile_i"][2], slices]
        spec = launch_spec(build.path)
        if splits > 1:  # the parts write a scratch buffer (index 3), the sum reads it
            parts = splits * m * n * getattr(w, "b", 1)
            assert np.prod(spec["scratch"][0]["shape"]) == parts
            assert sorted(kernel["args"]) == [0, 1, 3] and sorted(sums[0]["args"]) == [2, 3]
        else:
            assert sorted(kernel["args"]) == [0, 1, 2] and spec["scratch"] == []


def test_seeds_cover_the_classic_tiles_and_fill_the_sms():
    seeds = task_seeds(gemm(WORKLOADS["dense_bert"]), limit=64)
    tiles = {(np.prod(c["tile_i"][1:]), np.prod(c["tile_j"][1:]), c["tile_i"][1] * c["tile_i"][3],
              c["tile_j"][1] * c["tile_j"][3]) for c in seeds}
    assert {(64, 64, 4, 4), (32, 64, 4, 4), (64, 32, 4, 4), (128, 128, 8, 8)} <= tiles
    # 128 blocks of 32x96 (or 64x48): one block for each of the H100's 132 SMs but four
    assert {(32, 96, 4, 4), (64, 48, 4, 4)} & tiles
    threads = {c["tile_i"][2] * c["tile_j"][2] for c in seeds}
    assert 256 in threads and 128 in threads


@pytest.mark.parametrize("change, message", [
    ({"tile_i": (8, 1, 64, 1), "tile_j": (8, 1, 32, 2)}, "2048 threads per block exceed 1024"),
    ({"tile_i": (4, 4, 8, 4), "tile_j": (4, 4, 8, 4)}, "accumulator of 256 floats"),
    ({"tile_i": (64, 1, 2, 4), "tile_j": (64, 1, 2, 4)}, "less than a warp"),
    ({"tile_i": (4, 2, 16, 4), "tile_j": (4, 2, 16, 4), "tile_k": (16, 32),
      "pipeline": "async4"}, "B of shared memory exceed 49152"),
    ({"tile_k": (2, 256)}, "has no candidate"),  # K tiles of more than 32: not in the space
])
def test_configs_breaking_the_gpu_limits_are_refused(change, message):
    task = gemm(WORKLOADS["matmul_512"])
    base = {"tile_i": (8, 1, 16, 4), "tile_j": (8, 1, 16, 4), "tile_k": (32, 16),
            "pipeline": "double", "transpose": True, "pad": 4, "k_parts": "none"}
    with pytest.raises(InvalidConfigError, match=message):
        apply_config(task, Config({**base, **change}))


def test_a_pipeline_needs_as_many_k_tiles_as_stages():
    task = gemm(BatchMatmul(b=2, m=64, n=64, k=64))
    config = Config(tile_i=(1, 1, 16, 4), tile_j=(1, 1, 16, 4), tile_k=(2, 32), pipeline="async3",
                    transpose=True, pad=4, k_parts="none")
    with pytest.raises(InvalidConfigError, match="2 K tiles cannot fill a async3 pipeline"):
        apply_config(task, config)
    apply_config(task, Config({**config, "pipeline": "async2"}))


def test_kernels_load_float4_and_double_buffer_their_shared_panels():
    task = gemm(WORKLOADS["matmul_512"])
    tiles = {"tile_i": (8, 1, 16, 4), "tile_j": (8, 1, 16, 4), "tile_k": (32, 16), "pad": 4,
             "k_parts": "none"}
    source = cuda_source(task, Config(tiles, pipeline="double", transpose=True))
    # A (K contiguous) and B (N contiguous) read from global memory 4 floats at a time, the
    # fragments from shared memory too, the result written back so
    assert re.search(r"= \*\(float4\*\)\(A_ptr \+", source)
    assert re.search(r"= \*\(float4\*\)\(B_ptr \+", source)
    assert re.search(r"\*\(float4\*\)\(A_shared_local_ptr(_\d)? \+ 0\) = "
                     r"\*\(float4\*\)\(A_shared_ptr", source)
    assert re.search(r"\*\(float4\*\)\(C_ptr \+ .*\) = \*\(float4\*\)\(C_local_ptr", source)
    # two buffers of 16 K-rows of 64 + 4 floats (the padding against bank conflicts) each
    assert shared_floats(source) == {"A_shared_ptr": 2 * 16 * 68, "B_shared_ptr": 2 * 16 * 68}
    single = cuda_source(task, Config(tiles, pipeline="none", transpose=True))
    assert shared_floats(single) == {"A_shared_ptr": 16 * 68, "B_shared_ptr": 16 * 68}
    # prefetch: the next tile is loaded into registers before the FMAs (one buffer)
    prefetch = cuda_source(task, Config(tiles, pipeline="prefetch", transpose=True))
    assert shared_floats(prefetch) == shared_floats(single)
    assert "float4 A_shared_local_ptr[1];" in prefetch
    # async: three buffers filled by 16-byte cp.async where the layouts agree (A as it is:
    # 64 rows of 16 + 4 floats)
    copies = cuda_source(task, Config(tiles, pipeline="async3", transpose=False))
    assert "cp.async.cg.shared.global" in copies and "cp.async.wait_group 1;" in copies
    assert shared_floats(copies) == {"A_shared_ptr": 3 * 64 * 20, "B_shared_ptr": 3 * 16 * 68}


def shared_floats(source: str) -> dict[str, int]:
    """Floats per ``__shared__`` array (TVM types an array float4 when all its accesses are)."""
    lanes = {"float": 1, "float2": 2, "float4": 4}
    return {name: lanes[kind] * int(count) for kind, name, count in
            re.findall(r"__shared__ alignas\(\d+\) (float\d?) (\w+)\[(\d+)\];", source)}


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("transpose", [True, False])
def test_emulated_kernels_match_numpy_under_every_pipeline(emulator, pipeline, transpose):
    check(emulator, gemm(SMALL_DENSE), Config(SMALL_TILES, pipeline=pipeline,
                                              transpose=transpose, pad=4))


@pytest.mark.parametrize("workload, config", [
    (BatchMatmul(b=3, m=64, n=64, k=32),
     Config(tile_i=(2, 1, 8, 4), tile_j=(1, 2, 8, 4), tile_k=(2, 16), pipeline="prefetch",
            transpose=False, pad=4, k_parts="none")),
    (Matmul(m=200, n=120, k=72),  # 4-byte cp.async of a transposed panel, 2-wide elsewhere
     Config(tile_i=(4, 1, 25, 2), tile_j=(2, 1, 15, 4), tile_k=(6, 12), pipeline="async2",
            transpose=True, pad=4, k_parts="none")),
    (Dense(batch=40, in_features=200, out_features=24),
     Config(tile_i=(1, 1, 40, 1), tile_j=(1, 1, 12, 2), tile_k=(20, 10), pipeline="async3",
            transpose=False, pad=0, k_parts="none")),
])
def test_emulated_irregular_and_batched_kernels_match_numpy(emulator, workload, config):
    check(emulator, gemm(workload), config)


@pytest.mark.parametrize("workload, config", [
    # 37 rows (a prime: tiles of 1 or 37 rows) computed as 48, the zero fill inlined into the
    # shared-memory copy under a bounds test; the output's 37 rows written back
    (Dense(batch=37, in_features=200, out_features=24, bias=True),
     Config(tile_i=(1, 1, 16, 3), tile_j=(1, 1, 12, 2), tile_k=(20, 10), pipeline="double",
            transpose=False, pad=0, k_parts="none")),
    # M, N and K all ragged (a ViT's 197 tokens in attention), K split between blocks
    (BatchMatmul(b=2, m=37, n=37, k=37),
     Config(tile_i=(1, 1, 12, 4), tile_j=(3, 1, 16, 1), tile_k=(6, 8), pipeline="prefetch",
            transpose=True, pad=4, k_parts="split3")),
])
def test_ragged_axes_are_padded_and_match_numpy(emulator, workload, config):
    task = gemm(workload)
    knobs = {k.name: k for k in task_space(task).knobs}
    assert knobs["tile_i"].extent == 48 and knobs["tile_k"].extent in (48, 200)
    check(emulator, task, config)


def test_cp_async_is_refused_for_a_padded_operand():
    with pytest.raises(InvalidConfigError, match="padded"):
        apply_config(gemm(Matmul(m=37, n=64, k=64)),
                     Config(tile_i=(1, 1, 16, 3), tile_j=(1, 1, 16, 4), tile_k=(4, 16),
                            pipeline="async2", transpose=False, pad=0, k_parts="none"))


def fused_dense_relu() -> PrimFuncWorkload:
    """A model's fused function: dense with bias and ReLU, weights transposed by a producer."""
    from tvm import te, topi

    x = te.placeholder((48, 96), "float32", name="x")
    w = te.placeholder((96, 64), "float32", name="w")
    bias = te.placeholder((64,), "float32", name="bias")
    wt = topi.transpose(w)  # [64, 96]: read through by the shared-memory copy
    k = te.reduce_axis((0, 96), name="k")
    y = te.compute((48, 64), lambda i, j: te.sum(x[i, k] * wt[j, k], axis=k), name="dense")
    out = topi.nn.relu(topi.add(y, bias))
    return PrimFuncWorkload.from_prim_func(te.create_prim_func([x, w, bias, out]), "dense_relu")


@pytest.mark.parametrize("workload, config", [
    (SMALL_DENSE,  # bias fused; 2 slices of each 16-deep K tile, 8 K rows each
     Config(tile_i=(2, 1, 8, 4), tile_j=(2, 1, 16, 4), tile_k=(4, 16), pipeline="prefetch",
            transpose=True, pad=4, k_parts="slice2")),
    (BatchMatmul(b=3, m=64, n=64, k=32),
     Config(tile_i=(2, 1, 8, 4), tile_j=(1, 1, 16, 4), tile_k=(2, 16), pipeline="async2",
            transpose=False, pad=4, k_parts="slice4")),
    (Matmul(m=200, n=120, k=72),
     Config(tile_i=(4, 1, 25, 2), tile_j=(2, 1, 15, 4), tile_k=(6, 12), pipeline="double",
            transpose=True, pad=4, k_parts="slice2")),
])
def test_emulated_sliced_k_kernels_match_numpy(emulator, workload, config):
    source = check(emulator, gemm(workload), config)
    # the slices are threadIdx.z; their partial sums meet in shared memory
    assert "threadIdx.z" in source and source.count("__syncthreads()") >= 2


@pytest.mark.parametrize("workload, config", [
    (SMALL_DENSE,  # bias fused into the sum kernel; 2 parts of 2 K tiles each
     Config(tile_i=(2, 1, 8, 4), tile_j=(2, 2, 8, 4), tile_k=(4, 16), pipeline="double",
            transpose=True, pad=4, k_parts="split2")),
    (BatchMatmul(b=3, m=64, n=64, k=48),  # parts beside the batch on blockIdx.z
     Config(tile_i=(2, 1, 8, 4), tile_j=(1, 1, 16, 4), tile_k=(3, 16), pipeline="none",
            transpose=False, pad=4, k_parts="split3")),
    (Matmul(m=200, n=120, k=72),
     Config(tile_i=(4, 1, 25, 2), tile_j=(2, 1, 15, 4), tile_k=(6, 12), pipeline="async2",
            transpose=True, pad=4, k_parts="split3")),
    (fused_dense_relu(),
     Config(tile_i=(3, 1, 8, 2), tile_j=(1, 2, 8, 4), tile_k=(6, 16), pipeline="prefetch",
            transpose=True, pad=4, k_parts="split2")),
])
def test_emulated_split_k_kernels_match_numpy(emulator, workload, config):
    source = check(emulator, gemm(workload), config)
    # the parts' kernel and the sum's, through a scratch buffer TVM allocates
    kernels = re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(", source)
    assert len(set(kernels)) == 2


def test_sliced_k_refuses_uneven_slices_and_virtual_threads():
    task = gemm(WORKLOADS["matmul_512"])
    base = {"tile_i": (16, 1, 8, 4), "tile_j": (16, 1, 8, 4), "tile_k": (32, 16),
            "pipeline": "double", "transpose": True, "pad": 4}
    apply_config(task, Config({**base, "k_parts": "slice4"}))
    with pytest.raises(InvalidConfigError, match="not 4 equal slices"):
        apply_config(task, Config({**base, "tile_k": (256, 2), "k_parts": "slice4"}))
    with pytest.raises(InvalidConfigError, match="sliced K with virtual threads"):
        apply_config(task, Config({**base, "tile_j": (8, 2, 8, 4), "k_parts": "slice2"}))


def test_a_fused_epilogue_is_computed_in_the_write_back(emulator):
    workload = fused_dense_relu()
    assert is_gemm(workload.prim_func())
    task = gemm(workload)
    config = Config(tile_i=(3, 1, 8, 2), tile_j=(1, 2, 8, 4), tile_k=(6, 16), pipeline="double",
                    transpose=True, pad=4, k_parts="none")
    source = check(emulator, task, config)
    # one kernel: transpose, bias and ReLU fused
    assert set(re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(", source)) \
        == {"main_kernel"}
    assert "max(" in source or "fmaxf(" in source
    assert task_seeds(task)


def test_template_for_picks_cuda_gemm_for_matrix_products_only():
    conv = Conv2d(n=1, c=8, h=8, w=8, filters=8, kh=3, kw=3, padding=1)
    assert template_for(CUDA, Matmul(m=64, n=64, k=64).prim_func()) == "cuda.gemm"
    assert template_for(CUDA, Dense(batch=8, in_features=16, out_features=32,
                                    bias=True).prim_func()) == "cuda.gemm"
    assert template_for(CUDA, conv.prim_func()) == "cuda.generic"
    assert template_for(CUDA) == "cuda.generic"  # no function: as before
    assert template_for({"kind": "llvm"}, Matmul(m=8, n=8, k=8).prim_func()) == "cpu.generic"
    assert not is_gemm(conv.prim_func())
    with pytest.raises(TemplateMismatch):
        task_space(gemm(conv))


def check(emulator, task: Task, config: Config) -> str:
    """Build ``config`` as tuning does, run its kernel on the emulator, compare with numpy;
    the CUDA source."""
    import tempfile

    from tensortune.measure.cuda_build import build_cuda

    sch = apply_config(task, config)
    source = cuda_source(task, config)
    with tempfile.TemporaryDirectory() as tmp:
        spec = launch_spec(build_cuda(task, sch, tmp))
    workload = task.workload
    inputs = [np.ascontiguousarray(x) for x in workload.random_inputs(0)]
    ref = np.asarray(workload.reference(*inputs))
    # a cp.async landing as late and as early as a GPU may land it
    for eager in (False, True) if "cp.async" in source else (False,):
        out = np.full(ref.shape, np.nan, dtype=np.float32)
        scratch = [np.full(s["shape"], np.nan, s["dtype"]) for s in spec["scratch"]]
        emulator.emulate(source, spec["kernels"], [*inputs, out, *scratch], eager=eager)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    return source


def test_a_model_s_matrix_products_are_cuda_gemm_tasks_built_with_split_k(tmp_path):
    """A CUDA model's dense layers are ``cuda.gemm`` tasks; one built with its K split between
    blocks compiles with TVM's workspace for the partial sums, in one GPU library."""
    import torch

    from tensortune.session import Session
    from tensortune.settings import Settings
    from tensortune.workload import parse_target

    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                              torch.nn.Linear(128, 32)).eval()
    settings = Settings(home=tmp_path, target=parse_target("cuda:sm_90"))
    session = Session.from_torch(mlp, (torch.randn(16, 64),), settings=settings)
    gemms = [t for t in session.extract() if t.task.template == "cuda.gemm"]
    assert len(gemms) == 2 and all(t.tunable for t in gemms)
    first = next(t for t in gemms if "relu" in " ".join(t.functions))
    m, n, k = (knob.name for knob in task_space(first.task).knobs[:3])  # the model's names
    config = Config({m: (2, 1, 8, 1), n: (2, 1, 16, 4), k: (4, 16)}, pipeline="double",
                    transpose=True, pad=4, k_parts="split2")
    apply_config(first.task, config)  # valid for this task
    compiled = session.build(best={first.key: config})
    assert compiled.functions  # built for sm_90 (no GPU here to run it)
    scheduled = {name: info["schedule"] for name, info in compiled.functions.items()}
    assert "tuned" in scheduled.values()
