"""The CUDA template: spaces, kernels that compile (without a GPU), and configs it refuses."""
from __future__ import annotations

import pytest

from tensortune.space import Config, InvalidConfigError, apply_config, task_space
from tensortune.space.cuda_template import MAX_THREADS, device_functions, lower_for_cuda
from tensortune.workload import Conv2d, Dense, Matmul, Task

CUDA = {"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}}
MATMUL = Task(Matmul(m=16, n=16, k=16), CUDA, template="cuda.generic")
# i: 2 blocks x 8 threads; j: 2 virtual threads x 8 threads; k staged 4 at a time
MATMUL_CONFIG = Config(tile_i=(2, 1, 8, 1), tile_j=(1, 2, 8, 1), tile_k=(4, 4), unroll=0,
                       unroll_explicit=0)


def cuda_source(task: Task, config: Config) -> str:
    import tvm

    module = tvm.compile(apply_config(task, config).mod, target=task.tvm_target())
    return module.mod.imports[0].inspect_source("cuda")


def test_cuda_target_dict_carries_its_host():
    target = MATMUL.tvm_target()
    assert target.kind.name == "cuda" and target.host.kind.name == "llvm"


def test_space_has_block_vthread_thread_inner_splits_and_unroll_knobs():
    space = task_space(MATMUL)
    knobs = {k.name: k for k in space.knobs}
    assert list(knobs) == ["tile_i", "tile_j", "tile_k", "unroll", "unroll_explicit"]
    assert knobs["tile_i"].parts == 4 and knobs["tile_k"].parts == 2
    assert MATMUL_CONFIG in space


def test_matmul_kernel_binds_threads_stages_inputs_in_shared_memory_and_syncs():
    sch = apply_config(MATMUL, MATMUL_CONFIG)
    script = sch.mod["main"].script()
    for tag in ("blockIdx.x", "vthread.x", "threadIdx.x"):
        assert tag in script
    assert 'scope="shared"' in script and 'scope="local"' in script
    source = cuda_source(MATMUL, MATMUL_CONFIG)
    assert "__shared__" in source and "__syncthreads()" in source
    assert "threadIdx.x" in source and "blockIdx.x" in source
    [(name, kernel)] = device_functions(lower_for_cuda(sch.mod))
    assert name == "main_kernel" and "launch_thread" in kernel.script()


def test_conv2d_with_padding_and_dense_with_bias_compile():
    conv = Task(Conv2d(n=1, c=4, h=8, w=8, filters=8, kh=3, kw=3, padding=1), CUDA,
                template="cuda.generic")
    config = Config(tile_b=(1, 1, 1, 1), tile_f=(2, 1, 4, 1), tile_y=(2, 1, 4, 1),
                    tile_x=(1, 2, 4, 1), tile_rc=(2, 2), tile_ry=(3, 1), tile_rx=(1, 3),
                    unroll=64, unroll_explicit=1)
    source = cuda_source(conv, config)
    # padding is recomputed while the input is copied into shared memory
    assert "__shared__" in source and "__syncthreads()" in source and "data_shared" in source
    dense = Task(Dense(batch=8, in_features=16, out_features=16, bias=True), CUDA,
                 template="cuda.generic")
    config = Config(tile_i=(2, 1, 4, 1), tile_j=(1, 2, 8, 1), tile_k=(4, 4), unroll=0,
                    unroll_explicit=0)
    source = cuda_source(dense, config)
    assert "__shared__" in source and "bias" in source


def test_too_many_threads_are_refused_before_lowering():
    task = Task(Matmul(m=64, n=64, k=64), CUDA, template="cuda.generic")
    config = Config(tile_i=(1, 1, 64, 1), tile_j=(1, 1, 32, 2), tile_k=(4, 16), unroll=0,
                    unroll_explicit=0)
    with pytest.raises(InvalidConfigError, match=f"2048 threads per block exceed {MAX_THREADS}"):
        apply_config(task, config)


def test_shared_memory_beyond_48kb_fails_gpu_verification():
    task = Task(Matmul(m=256, n=256, k=256), CUDA, template="cuda.generic")
    # 128x64 tiles of A and B in shared memory: 64 KB per block
    config = Config(tile_i=(2, 1, 8, 16), tile_j=(2, 1, 8, 16), tile_k=(4, 64), unroll=0,
                    unroll_explicit=0)
    with pytest.raises(InvalidConfigError, match="exceeds the GPU limits"):
        apply_config(task, config)
