"""The generic CUDA template: multi-level tiling with thread binding and shared-memory staging.

After AutoTVM's ``conv2d_direct`` CUDA template and MetaSchedule's CUDA multi-level tiling, for
any TIR function whose main block is a single reduction (the functions ``cpu.generic`` takes).
Each spatial axis is split into four levels and each reduction axis into two:

    B (blockIdx.x) . V (vthread.x) . T (threadIdx.x) . R0 . R1 . S (per-thread tile)

The B, V and T levels of all spatial axes are fused and bound. Every input of the main block is
copied into shared memory at the innermost R0 loop by all threads of the block (cooperative
fetch), injective producers such as padding are inlined into that copy, the accumulator lives in
registers (``local``) and is written back per thread together with any fused elementwise
consumer, and the kernel carries an unroll pragma. Configs whose kernel breaks the GPU limits
(threads per block, shared memory per block) raise ``InvalidConfigError``.
"""
from __future__ import annotations

import math

from .analysis import TemplateMismatch, analyze, short_name
from .cuda_fallback import cuda_fallback
from .space import InvalidConfigError

MAX_THREADS = 1024  # threads per block
MAX_SHARED_BYTES = 48 * 1024  # static shared memory per block
MAX_VTHREADS = 16  # virtual threads per thread (each one is a copy of the thread's code)
MAX_LOCAL_ELEMS = 256  # accumulator elements per thread: beyond this the registers spill
UNROLL_STEPS = (0, 64, 512, 1500)
VERIFY_TARGET = {"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}}


def cuda_generic(cfg, sch):
    """Define (with a ``SpaceBuilder``) or apply (with a ``ConfigSource``) the CUDA space."""
    try:
        info = analyze(sch)
    except TemplateMismatch:  # not one tiled reduction: the rule for any function
        return cuda_fallback(cfg, sch)
    if not info.reduce:
        raise InvalidConfigError(f"block {info.name} has no reduction axis")

    # -- knobs (fixed order; none depends on another's value) ------------------------------------
    s_tiles = [cfg.split(f"tile_{short_name(n)}", e, 4) for n, e in info.spatial]
    r_tiles = [cfg.split(f"tile_{short_name(n)}", e, 2) for n, e in info.reduce]
    unroll = cfg.choice("unroll", UNROLL_STEPS)
    unroll_explicit = cfg.choice("unroll_explicit", (0, 1))

    threads = math.prod(t[2] for t in s_tiles)
    vthreads = math.prod(t[1] for t in s_tiles)
    local = math.prod(t[1] * t[3] for t in s_tiles)
    if threads > MAX_THREADS:
        raise InvalidConfigError(f"{threads} threads per block exceed {MAX_THREADS}")
    if vthreads > MAX_VTHREADS:
        raise InvalidConfigError(f"{vthreads} virtual threads exceed {MAX_VTHREADS}")
    if local > MAX_LOCAL_ELEMS:
        raise InvalidConfigError(f"accumulator of {local} elements per thread exceeds "
                                 f"{MAX_LOCAL_ELEMS}")

    main = sch.get_sblock(info.name)
    # padding and other injective producers are recomputed by the shared-memory copy
    for producer in sch.get_producers(main):
        sch.compute_inline(producer)
    consumers = list(sch.get_consumers(main))
    while len(consumers) == 1 and len(sch.get_consumers(consumers[0])) == 1:
        sch.reverse_compute_inline(sch.get_consumers(consumers[0])[0])
    if len(consumers) == 1:
        write_back = consumers[0]
        sch.set_scope(main, 0, "local")
    elif not consumers:
        write_back = sch.cache_write(main, 0, "local")
    else:
        raise InvalidConfigError(f"block {info.name} has {len(consumers)} consumers")

    out_name = sch.get(main).writes[0].source.name
    inputs = [(r.source.name, len(r.region)) for r in sch.get(main).reads
              if r.source.name != out_name]

    # -- tiling and binding -----------------------------------------------------------------------
    loops = sch.get_loops(main)
    n_s, n_r = len(info.spatial), len(info.reduce)
    s_loops = [sch.split(loops[i], list(s_tiles[i])) for i in range(n_s)]
    r_loops = [sch.split(loops[n_s + j], list(r_tiles[j])) for j in range(n_r)]
    sch.reorder(*[s[0] for s in s_loops], *[s[1] for s in s_loops], *[s[2] for s in s_loops],
                *[r[0] for r in r_loops], *[r[1] for r in r_loops], *[s[3] for s in s_loops])
    bx = sch.fuse(*[s[0] for s in s_loops])
    vx = sch.fuse(*[s[1] for s in s_loops])
    tx = sch.fuse(*[s[2] for s in s_loops])
    sch.bind(bx, "blockIdx.x")
    sch.bind(vx, "vthread.x")
    sch.bind(tx, "threadIdx.x")
    sch.reverse_compute_at(write_back, tx, preserve_unit_loops=True)

    # -- shared-memory staging with a cooperative fetch -------------------------------------------
    stage_at = r_loops[-1][0]
    for name, ndim in inputs:
        index = [r.source.name for r in sch.get(main).reads].index(name)
        shared = sch.cache_read(main, index, "shared")
        sch.compute_at(shared, stage_at, preserve_unit_loops=True)
        copy_loops = sch.get_loops(shared)[-ndim:]
        fused = sch.fuse(*copy_loops) if len(copy_loops) > 1 else copy_loops[0]
        if threads > 1:
            _, inner = sch.split(fused, [None, threads])
            sch.bind(inner, "threadIdx.x")
    sch.decompose_reduction(main, r_loops[0][0])

    if unroll:
        sch.annotate(bx, "pragma_auto_unroll_max_step", unroll)
        sch.annotate(bx, "pragma_unroll_explicit", unroll_explicit)
    verify_limits(sch)
    return sch


def verify_limits(sch) -> None:
    """Lower the schedule as ``tvm.compile`` does and check the kernels against the GPU limits."""
    from tvm.s_tir.analysis import verify_gpu_code

    kernels = device_functions(lower_for_cuda(sch.mod))
    limits = {"max_threads_per_block": MAX_THREADS, "max_shared_memory_per_block": MAX_SHARED_BYTES,
              "max_thread_x": MAX_THREADS, "max_vthread": MAX_VTHREADS}
    for name, func in kernels:
        if not verify_gpu_code(func, limits):
            raise InvalidConfigError(f"kernel {name} exceeds the GPU limits per block "
                                     f"({MAX_THREADS} threads, {MAX_SHARED_BYTES} B of shared "
                                     "memory)")


def lower_for_cuda(mod, target=None):
    """``mod`` through the TIR pipeline ``tvm.compile`` uses, before code generation."""
    import tvm

    target = tvm.target.Target(target or VERIFY_TARGET)
    bound = tvm.tirx.transform.BindTarget(target)(mod)
    pipeline, _, _ = tvm.tirx.get_tir_pipeline("default")
    return pipeline(bound)


def device_functions(lowered) -> list[tuple[str, object]]:
    """The (name, ``PrimFunc``) kernels of a lowered module (those bound to a GPU target)."""
    out = []
    for gv, func in lowered.functions.items():
        target = func.attrs.get("target") if func.attrs is not None else None
        if target is not None and target.kind.name == "cuda":
            out.append((gv.name_hint, func))
    return out

