"""The CUDA GEMM template: shared-memory K tiles with vectorized loads, register tiles, and
software pipelining, for functions whose main block is a matrix product.

For ``C[batch.., M, N] = sum_k A[.., M, .., K] * B[.., K, .., N]`` in any operand layout
(matmul, dense with ``W[N, K]``, batch_matmul, and fused model functions with elementwise
epilogues such as bias and activation), after the classic SGEMM recipe (and TVM dlight's
``Matmul`` rule):

    M: BY (blockIdx.y) . VY (vthread.y) . TY (threadIdx.y) . IY
    N: BX (blockIdx.x) . VX (vthread.x) . TX (threadIdx.x) . IX
    K: KO (K tiles, pipelined) . KI (one tile, unrolled)
    batch axes: blockIdx.z

A block computes a ``BM x BN`` tile (``BM = VY*TY*IY``); each thread a ``VY*IY x VX*IX``
register tile whose ``V`` parts lie ``T*I`` apart, so that the fragment reads of a warp fall
on distinct banks. Per K tile, all threads of a block copy the ``BM x BK`` and ``BK x BN``
panels of A and B into shared memory (cooperatively, in 4-wide vectors along the operand's
contiguous axis where tile and row allow: ``float4`` loads), K-major (``[BK][BM + pad]``) so
that the per-thread fragments are vector reads too; per k step each thread copies its A and
B fragments into registers and does ``(VY*IY) * (VX*IX)`` FMAs. The accumulator is written
back (with any fused elementwise epilogue) in vectors along N.

Knobs: ``tile_<m>`` and ``tile_<n>`` (4 parts each, as above), ``tile_<k>`` (K tiles, tile
of at most ``MAX_K_TILE``), ``pipeline`` (below), ``transpose`` (whether an operand whose
contiguous axis is K, A of a matmul or both of a dense, is stored K-major, transposed on the
way, or as it is: ``[BM][BK + pad]``, scalar fragment reads, but whole 16-byte ``cp.async``
copies), ``pad`` (floats appended to each shared row against bank conflicts), and two ways
to cut K for outputs too small to fill the GPU (``cuda_gemm_split``), one knob since they
exclude each other, ``k_parts``: ``none``, ``slice2``/``slice4`` (each K tile sliced between
groups of a block's threads, ``threadIdx.z``, summed through shared memory) or
``split2``-``split4`` (K split between blocks, ``blockIdx.z``, whose partial sums a second
kernel adds up from a global scratch buffer: cuBLAS' plan for 128x768x3072).

The ``pipeline`` knob picks how the K tiles overlap the FMAs (TVM's software pipelining,
``software_pipeline_stage``/``order`` on KO):

- ``none``: one buffer per operand, two barriers per tile;
- ``double``: two shared buffers, the next tile copied while the current one is used;
- ``prefetch``: the next tile loaded into registers before the FMAs and stored to shared
  memory after them (``tirx.manifest_shared_memory_local_stage``): the global latency hides
  behind the FMAs;
- ``async2`` / ``async3`` / ``async4``: 2-4 shared buffers filled by ``cp.async`` (sm_80+),
  16 bytes at a time where shared and global layouts agree, 4 bytes where the panel is
  transposed on the way.

Configs that break the GPU limits (threads, shared memory, registers) raise
``InvalidConfigError``; functions that are not a GEMM raise ``TemplateMismatch``.
"""
from __future__ import annotations

import math

from .analysis import short_name
from .cuda_gemm_info import GemmInfo, Operand, prepare_gemm
from .cuda_gemm_split import sum_slices, sum_splits
from .cuda_intrinsics import cp_async_intrin
from .cuda_template import MAX_SHARED_BYTES, MAX_THREADS, MAX_VTHREADS, verify_limits
from .space import InvalidConfigError
from .template import SpaceBuilder

MAX_ACCUMULATORS = 128  # floats of the register tile per thread: beyond this the registers spill
MAX_K_TILE = 32  # elements of K per shared-memory tile
MAX_GRID_YZ = 65535
WARP = 32
PIPELINES = ("none", "double", "prefetch", "async2", "async3", "async4")
PADS = (4, 0)  # floats appended to each shared-memory row
# K whole, sliced between a block's threads, or split between blocks: (slices, splits) by name
K_PARTS = {"none": (1, 1), "slice2": (2, 1), "slice4": (4, 1), "split2": (1, 2),
           "split3": (1, 3), "split4": (1, 4)}
VECTOR = 4  # float4: 16 bytes per load or store


def cuda_gemm(cfg, sch):
    """Define (with a ``SpaceBuilder``) or apply (with a ``ConfigSource``) the GEMM space."""
    main, info, consumer = prepare_gemm(sch)
    (m_name, m_ext), (n_name, n_ext), (k_name, k_ext) = info.m, info.n, info.k

    # -- knobs (fixed order; none depends on another's value) ------------------------------------
    tile_m = cfg.split(f"tile_{short_name(m_name)}", m_ext, 4)
    tile_n = cfg.split(f"tile_{short_name(n_name)}", n_ext, 4)
    tile_k = cfg.split(f"tile_{short_name(k_name)}", k_ext, 2, max_inner=MAX_K_TILE)
    pipeline = cfg.choice("pipeline", PIPELINES)
    transpose = cfg.choice("transpose", (True, False))
    pad = cfg.choice("pad", PADS)
    k_parts = cfg.choice("k_parts", tuple(K_PARTS))
    if isinstance(cfg, SpaceBuilder):  # defining the space: the knobs are all it needs
        return sch
    slices, splits = K_PARTS[k_parts]
    if info.padded and pipeline.startswith("async"):
        # cp.async copies whole elements unconditionally: a padded panel needs its bounds test
        raise InvalidConfigError(f"pipeline {pipeline}: operands {', '.join(info.padded)} are "
                                 "padded (a ragged axis), cp.async cannot zero-fill them")

    check_limits(info, tile_m, tile_n, tile_k, pipeline, transpose, pad, slices, splits)
    threads = (("threadIdx.z", slices), ("threadIdx.y", tile_m[2]), ("threadIdx.x", tile_n[2]))
    threads = tuple(t for t in threads if t[0] != "threadIdx.z" or slices > 1)

    loops = dict(zip(info.loops, sch.get_loops(main)))
    final = partial = kz = None
    if slices > 1 or splits > 1:
        # K cut in parts summed apart (rfactor), then added up: by the threads of a block
        # (sliced, through shared memory) or by blocks (split, through a global scratch buffer
        # and a second kernel, as cuBLAS does for 128x768x3072) -- more warps per SM, or more
        # blocks, for outputs too small to fill the GPU
        k0, kz, k1 = sch.split(loops[k_name], [tile_k[0], slices, tile_k[1] // slices]
                               if slices > 1 else [splits, tile_k[0] // splits, tile_k[1]])
        final, main = main, sch.rfactor(kz if slices > 1 else k0, factor_axis=0)
        # the old loops now belong to ``final``; the rfactor block has a copy of the nest
        rf_loops = list(sch.get_loops(main))
        at = info.loops.index(k_name)
        k0, kz, k1 = rf_loops[at:at + 3]
        if splits > 1:
            kz, k0 = k0, kz
        loops = dict(zip(info.loops, rf_loops[:at] + [k0] + rf_loops[at + 3:]))
        partial = sch.cache_write(main, 0, "local")
        if slices > 1:
            sch.set_scope(partial, 0, "shared")
    else:
        k0, k1 = sch.split(loops[k_name], list(tile_k))

    # -- write-back: the accumulator in registers, the epilogue fused -----------------------------
    reduced = final if final is not None else main
    if consumer is not None:
        sch.set_scope(reduced, 0, "local")
        write_back = consumer
        vector_out = _elementwise_of(sch, consumer, info)
    else:
        write_back = sch.cache_write(reduced, 0, "local")
        vector_out = True
    width = _vector_width(tile_n[3], n_ext) if vector_out else 1

    # -- tiling and binding ------------------------------------------------------------------------
    outer = [loops[n] for n in info.loops if n not in (m_name, n_name, k_name)]
    if splits > 1:
        outer = [kz, *outer]  # the K parts are blocks along z, beside the batch
    m0, m1, m2, m3 = sch.split(loops[m_name], list(tile_m))
    n0, n1, n2, n3 = sch.split(loops[n_name], list(tile_n))
    sch.reorder(*outer, m0, n0, m1, n1, *([kz] if slices > 1 else []), m2, n2, k0, k1, m3, n3)
    if outer:
        bz = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        sch.bind(bz, "blockIdx.z")
    sch.bind(m0, "blockIdx.y")
    sch.bind(n0, "blockIdx.x")
    sch.bind(m1, "vthread.y")
    sch.bind(n1, "vthread.x")
    if slices > 1:
        sch.bind(kz, "threadIdx.z")
    sch.bind(m2, "threadIdx.y")
    sch.bind(n2, "threadIdx.x")

    if slices > 1:
        _write_back_at(sch, partial, n2, 1)
        sum_slices(sch, final, write_back, n0, threads, m_name, n_name, width)
    elif splits > 1:
        _write_back_at(sch, partial, n2, _vector_width(tile_n[3], n_ext))
        sum_splits(sch, final, write_back, info.loops, m_name, n_name, k_name, width)
    else:
        _write_back_at(sch, write_back, n2, width)

    # -- shared-memory panels, copied cooperatively ------------------------------------------------
    is_async = pipeline.startswith("async")
    for operand, tile_mn in ((info.a, tile_m), (info.b, tile_n)):
        _stage_shared(sch, main, k0, operand, tile_mn, tile_k, threads, transpose, pad,
                      pipeline, is_async, operand.buffer in info.padded)

    # -- register fragments per k step -------------------------------------------------------------
    for operand, tile_mn in ((info.a, tile_m), (info.b, tile_n)):
        index = _read_index(sch, main, operand.buffer + "_shared")
        frag = sch.cache_read(main, index, "local")
        sch.compute_at(frag, k1, preserve_unit_loops=True)
        inner = sch.get_loops(frag)[-1]
        k_major = transpose or not operand.k_inner
        width = _vector_width(tile_mn[3], tile_mn[3]) if k_major else 1
        if width > 1 and _extent(sch, inner) % width == 0:
            _, lanes = sch.split(inner, [None, width])
            sch.vectorize(lanes)
    for loop in (k1, m3, n3):
        sch.unroll(loop)
    sch.decompose_reduction(main, k0)

    if pipeline == "double":
        _pipeline(sch, k0, [0, 0, 1], [0, 1, 2])
    elif pipeline == "prefetch":
        # the manifested register stage splits each copy in two: [A load, A store, B load,
        # B store, FMAs]; the loads go first, the stores after the FMAs
        _pipeline(sch, k0, [0, 0, 0, 0, 1], [0, 3, 1, 4, 2])
    elif is_async:
        stages = int(pipeline[-1])
        _pipeline(sch, k0, [0, 0, stages - 1], [0, 1, 2])
        sch.annotate(k0, "software_pipeline_async_stages", [0])
    verify_limits(sch)
    return sch


def check_limits(info: GemmInfo, tile_m, tile_n, tile_k, pipeline: str, transpose: bool,
                 pad: int, slices: int = 1, splits: int = 1) -> dict:
    """Raise ``InvalidConfigError`` for a config that breaks a GPU limit; its geometry else."""
    threads = tile_m[2] * tile_n[2] * slices
    vthreads = tile_m[1] * tile_n[1]
    accumulators = tile_m[1] * tile_m[3] * tile_n[1] * tile_n[3]
    bm, bn, bk = math.prod(tile_m[1:]), math.prod(tile_n[1:]), tile_k[1]
    if threads > MAX_THREADS:
        raise InvalidConfigError(f"{threads} threads per block exceed {MAX_THREADS}")
    if slices > 1 and splits > 1:
        raise InvalidConfigError("K both sliced and split")
    if tile_k[0] % splits:
        raise InvalidConfigError(f"{tile_k[0]} K tiles are not {splits} equal parts")
    if tile_k[1] % slices:
        raise InvalidConfigError(f"a K tile of {tile_k[1]} is not {slices} equal slices")
    if slices > 1 and (bm * bn // _vector_width(tile_n[3], info.n[1])) % threads:
        # the block's sum over the slices must give every thread the same number of outputs:
        # TVM checks a ragged last round against the whole output, not the block's tile
        raise InvalidConfigError(f"the {bm}x{bn} tile's sum does not divide among "
                                 f"{threads} threads")
    if slices > 1 and vthreads > 1:
        # TVM gives each virtual thread its own copy of the shared partial sums, and the
        # block's sum then adds the wrong ones
        raise InvalidConfigError("sliced K with virtual threads")
    if threads < min(WARP, info.m[1] * info.n[1]):
        raise InvalidConfigError(f"{threads} threads per block: less than a warp")
    if vthreads > MAX_VTHREADS:
        raise InvalidConfigError(f"{vthreads} virtual threads exceed {MAX_VTHREADS}")
    if accumulators > MAX_ACCUMULATORS:
        raise InvalidConfigError(f"accumulator of {accumulators} floats per thread exceeds "
                                 f"{MAX_ACCUMULATORS}")
    if tile_m[0] > MAX_GRID_YZ or splits * math.prod(e for _, e in info.batch) > MAX_GRID_YZ:
        raise InvalidConfigError(f"more than {MAX_GRID_YZ} blocks along grid y or z")
    stages = {"none": 1, "double": 2, "prefetch": 1}.get(pipeline) or int(pipeline[-1])
    if pipeline != "none" and tile_k[0] // splits < max(stages, 2):
        raise InvalidConfigError(f"{tile_k[0] // splits} K tiles cannot fill a {pipeline} "
                                 "pipeline")
    shared = 0
    for operand, rows in ((info.a, bm), (info.b, bn)):
        k_major = transpose or not operand.k_inner
        inner, outer = (rows, bk) if k_major else (bk, rows)
        row = inner + (pad if pad < inner else 0)
        shared += 4 * stages * outer * row
    if slices > 1:  # the slices' partial sums (TVM reuses the panels' memory only at times)
        shared += 4 * slices * bm * bn
    if shared > MAX_SHARED_BYTES:
        raise InvalidConfigError(f"{shared} B of shared memory exceed {MAX_SHARED_BYTES}")
    return {"threads": threads, "block": (bm, bn, bk), "shared_bytes": shared,
            "accumulators": accumulators, "stages": stages}


def _stage_shared(sch, main, k0, operand: Operand, tile_mn, tile_k, threads, transpose, pad,
                  pipeline, is_async, padded: bool = False) -> None:
    """Copy ``operand``'s panel into shared memory at the K-tile loop: all threads of the
    block, in vectors along the operand's contiguous dimension, stored K-major unless the
    operand is K-contiguous and ``transpose`` is off. A ``padded`` operand's zero fill is
    inlined into the copy: it reads the real buffer under a bounds test, no padded copy."""
    from tvm.tirx import IndexMap

    index = _read_index(sch, main, operand.buffer)
    shared = sch.cache_read(main, index, "shared")
    if padded:
        for producer in sch.get_producers(shared):
            sch.compute_inline(producer)
    sch.compute_at(shared, k0, preserve_unit_loops=True)
    k_major = transpose or not operand.k_inner
    ndim = operand.ndim
    if k_major and operand.k_inner:  # [.., MN, .., K] -> [.., K, MN]
        rest = [d for d in range(ndim) if d not in (operand.k_dim, operand.mn_dim)]
        perm = rest + [operand.k_dim, operand.mn_dim]
        sch.transform_layout(shared, ("write", 0),
                             IndexMap.from_func(lambda *axes: [axes[p] for p in perm], ndim=ndim))
    # the row pitch: the tile's innermost extent plus ``pad`` floats (bank conflicts)
    tile_rows = math.prod(tile_mn[1:])
    row = tile_rows if k_major else tile_k[1]
    if pad and row > pad and ndim >= 2:
        sch.storage_align(shared, 0, axis=ndim - 2, factor=row, offset=pad)
    # vectors along the global contiguous dimension, if the tile and the rows keep them aligned
    global_inner = tile_k[1] if operand.k_inner else tile_rows
    width = _vector_width(global_inner, operand.shape[-1])
    contiguous = not (k_major and operand.k_inner)  # shared and global agree on the inner axis
    loops = sch.get_loops(shared)[-ndim:]
    if is_async and not contiguous:
        width = 1  # cp.async of 4 bytes per element: the store is transposed
    lanes = None
    if width > 1 or is_async:
        outer, lanes = sch.split(loops[-1], [None, width])
        loops = [*loops[:-1], outer]
    if is_async:
        sch.tensorize(lanes, cp_async_intrin(width))
        shared = sch.get_sblock(operand.buffer + "_shared_o")
        if pad and row > pad and ndim >= 2:  # the annotation went with the replaced block
            sch.storage_align(shared, 0, axis=ndim - 2, factor=row, offset=pad)
    elif lanes is not None:
        sch.vectorize(lanes)
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    serial, *bound = sch.split(fused, [None, *(extent for _, extent in threads)])
    for loop, (name, _) in zip(bound, threads):
        sch.bind(loop, name)
    if pipeline == "prefetch":
        # (the manifest pass wants serial loops above the copy: nvcc unrolls it)
        sch.annotate(shared, "tirx.manifest_shared_memory_local_stage", 1)
    else:
        sch.unroll(serial)


def _write_back_at(sch, block, loop, width: int) -> None:
    """``block`` (a write-back) under ``loop``, its innermost loop in vectors of ``width``."""
    sch.reverse_compute_at(block, loop, preserve_unit_loops=True)
    last = sch.get_loops(block)[-1]
    if width > 1 and _extent(sch, last) % width == 0:
        _, lanes = sch.split(last, [None, width])
        sch.vectorize(lanes)


def _pipeline(sch, loop, stages, order) -> None:
    sch.annotate(loop, "software_pipeline_stage", stages)
    sch.annotate(loop, "software_pipeline_order", order)


def _read_index(sch, block, buffer: str) -> int:
    names = [r.source.name for r in sch.get(block).reads]
    return names.index(buffer)


def _extent(sch, loop) -> int:
    return int(sch.get(loop).extent)


def _vector_width(tile: int, extent: int) -> int:
    """The widest vector (4, 2, 1 floats) dividing both a tile's extent and the full row, so
    that every vector is aligned."""
    for width in (VECTOR, 2):
        if tile % width == 0 and extent % width == 0:
            return width
    return 1


def _elementwise_of(sch, consumer, info: GemmInfo) -> bool:
    """Whether ``consumer`` writes the GEMM result elementwise (same indices), so that its
    innermost loop is N and can be vectorized."""
    block = sch.get(consumer)
    main_out = sch.get(sch.get_sblock(info.name)).writes[0].source.name
    write = [str(r.min) for r in block.writes[0].region]
    for region in block.reads:
        if region.source.name == main_out:
            return [str(r.min) for r in region.region] == write
    return False
