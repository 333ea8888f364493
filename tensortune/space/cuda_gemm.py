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
copies) and ``pad`` (floats appended to each shared row against bank conflicts).

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
from dataclasses import dataclass

from .analysis import TemplateMismatch, short_name
from .cuda_intrinsics import cp_async_intrin
from .cuda_template import MAX_SHARED_BYTES, MAX_THREADS, MAX_VTHREADS, _verify
from .space import InvalidConfigError
from .template import SpaceBuilder

MAX_ACCUMULATORS = 128  # floats of the register tile per thread: beyond this the registers spill
MAX_K_TILE = 32  # elements of K per shared-memory tile
MAX_GRID_YZ = 65535
WARP = 32
PIPELINES = ("none", "double", "prefetch", "async2", "async3", "async4")
PADS = (4, 0)  # floats appended to each shared-memory row
VECTOR = 4  # float4: 16 bytes per load or store


@dataclass(frozen=True)
class Operand:
    buffer: str
    ndim: int
    k_dim: int  # the dimension K indexes
    mn_dim: int  # the dimension M (operand A) or N (operand B) indexes
    shape: tuple[int, ...]

    @property
    def k_inner(self) -> bool:
        """Whether K is the operand's contiguous dimension (A of a matmul, both of dense)."""
        return self.k_dim == self.ndim - 1


@dataclass(frozen=True)
class GemmInfo:
    name: str  # the main block
    m: tuple[str, int]
    n: tuple[str, int]
    k: tuple[str, int]
    batch: tuple[tuple[str, int], ...]  # axes both operands index: blockIdx.z
    loops: tuple[str, ...]  # the block's iterators in loop order, for the split
    a: Operand
    b: Operand


def gemm_info(sch) -> GemmInfo:
    """The GEMM structure of the main block of ``sch`` (its producers already inlined):
    ``TemplateMismatch`` if it has none."""
    from tvm.tirx import IntImm, Var

    root = sch.get_sblock("root")
    blocks = list(sch.get_child_blocks(root))
    reductions = [b for b in blocks if any(int(iv.iter_type) == 2 for iv in sch.get(b).iter_vars)]
    if len(reductions) != 1:
        raise TemplateMismatch(f"a GEMM has one reduction block, found {len(reductions)}")
    main = reductions[0]
    block = sch.get(main)
    if len(block.writes) != 1:
        raise TemplateMismatch("the main block writes more than one buffer")
    out = block.writes[0].source
    kinds, extents = {}, {}
    for iv in block.iter_vars:
        if int(iv.iter_type) not in (0, 2):
            raise TemplateMismatch(f"unsupported iterator kind {iv.iter_type}")
        if not isinstance(iv.dom.extent, IntImm):
            raise TemplateMismatch("symbolic extents")
        kinds[iv.var.name] = int(iv.iter_type)
        extents[iv.var.name] = int(iv.dom.extent)
    reduce = [n for n, k in kinds.items() if k == 2]
    if len(reduce) != 1:
        raise TemplateMismatch(f"a GEMM reduces over one axis, not {len(reduce)}")
    k_name = reduce[0]
    loops = sch.get_loops(main)
    if len(loops) != len(kinds):
        raise TemplateMismatch("the main block is not one loop per iterator")
    reads = [r for r in block.reads if r.source.name != out.name]
    if len(reads) != 2 or len({r.source.name for r in reads}) != 2:
        raise TemplateMismatch(f"a GEMM reads two operands, not {len(reads)}")
    for buf in [out] + [r.source for r in reads]:
        if str(buf.dtype) != "float32":
            raise TemplateMismatch(f"buffer {buf.name} is {buf.dtype}, not float32")

    def dims(region) -> list[str | None]:
        names = []
        for rng in region.region:
            if not (isinstance(rng.extent, IntImm) and int(rng.extent) == 1):
                raise TemplateMismatch(f"{region.source.name} is read as a range")
            if isinstance(rng.min, Var) and rng.min.name in kinds:
                names.append(rng.min.name)
            elif isinstance(rng.min, IntImm):
                names.append(None)
            else:  # strides, windows, sums of iterators: a convolution, not a GEMM
                raise TemplateMismatch(f"{region.source.name} is indexed by {rng.min}")
        used = [n for n in names if n is not None]
        if len(used) != len(set(used)):
            raise TemplateMismatch(f"{region.source.name} uses an iterator twice")
        return names

    read_dims = [dims(r) for r in reads]
    out_dims = dims(block.writes[0])
    if any(k_name not in d for d in read_dims):
        raise TemplateMismatch("an operand does not depend on the reduction axis")
    m_axes, n_axes, batch = [], [], []
    for name, kind in kinds.items():
        if kind != 0 or extents[name] == 1:
            continue
        if name not in out_dims:
            raise TemplateMismatch(f"iterator {name} is not an output index")
        where = tuple(name in d for d in read_dims)
        if where == (True, True):
            batch.append(name)
        elif where == (False, False):
            raise TemplateMismatch(f"no operand depends on {name}")
        else:
            (m_axes if where[0] else n_axes).append(name)
    if len(m_axes) != 1 or len(n_axes) != 1:
        raise TemplateMismatch(f"a GEMM has one M and one N axis, found {m_axes} and {n_axes}")
    # B is the operand of the output's innermost axis (the write-back's vector)
    inner = [n for n in out_dims if n is not None and extents[n] > 1]
    if not inner or inner[-1] in batch:
        raise TemplateMismatch("the output's innermost axis is a batch axis")
    order = (0, 1) if inner[-1] == n_axes[0] else (1, 0)
    (m_name,), (n_name,) = (m_axes, n_axes) if order == (0, 1) else (n_axes, m_axes)
    a_read, b_read = reads[order[0]], reads[order[1]]
    a_dims, b_dims = read_dims[order[0]], read_dims[order[1]]

    def operand(region, names, mn) -> Operand:
        shape = tuple(int(s) for s in region.source.shape)
        if names[-1] not in (k_name, mn):
            raise TemplateMismatch(f"operand {region.source.name}: neither K nor {mn} is its "
                                   "contiguous axis")
        return Operand(region.source.name, len(shape), names.index(k_name), names.index(mn),
                       shape)

    return GemmInfo(block.name_hint, (m_name, extents[m_name]), (n_name, extents[n_name]),
                    (k_name, extents[k_name]), tuple((b, extents[b]) for b in batch),
                    tuple(iv.var.name for iv in block.iter_vars),
                    operand(a_read, a_dims, m_name), operand(b_read, b_dims, n_name))


def is_gemm(prim_func) -> bool:
    """Whether ``cuda.gemm`` can schedule ``prim_func`` (one GEMM block with at most an
    elementwise chain after it)."""
    from tvm.s_tir import Schedule

    try:
        sch = Schedule(prim_func)
        main, _, _ = _prepare(sch)
        return main is not None
    except Exception:  # noqa: BLE001 - TemplateMismatch, or a schedule step TVM refused
        return False


def _prepare(sch):
    """Inline producers into the main block and the epilogue chain into one consumer; the
    main block, its ``GemmInfo`` and the block that writes the result back (the consumer, or
    None for a cache write)."""
    root = sch.get_sblock("root")
    blocks = list(sch.get_child_blocks(root))
    reductions = [b for b in blocks if any(int(iv.iter_type) == 2 for iv in sch.get(b).iter_vars)]
    if len(reductions) != 1:
        raise TemplateMismatch(f"a GEMM has one reduction block, found {len(reductions)}")
    main = reductions[0]
    for producer in sch.get_producers(main):
        sch.compute_inline(producer)  # transposes, reshapes: read through by the shared copy
    info = gemm_info(sch)
    main = sch.get_sblock(info.name)
    consumers = list(sch.get_consumers(main))
    while len(consumers) == 1 and len(sch.get_consumers(consumers[0])) == 1:
        sch.reverse_compute_inline(sch.get_consumers(consumers[0])[0])
    if len(consumers) > 1:
        raise TemplateMismatch(f"block {info.name} has {len(consumers)} consumers")
    consumer = consumers[0] if consumers else None
    if consumer is not None and sch.get_consumers(consumer):
        raise TemplateMismatch("the epilogue is not a single chain")
    if consumer is not None:
        # other inputs of the epilogue (a slice of a residual): recomputed where it reads them
        for producer in sch.get_producers(consumer):
            if sch.get(producer).name_hint != info.name:
                sch.compute_inline(producer)
    left = len(sch.get_child_blocks(sch.get_sblock("root"))) - 1 - (consumer is not None)
    if left:
        raise TemplateMismatch(f"{left} blocks besides the GEMM and its epilogue")
    return main, info, consumer


def cuda_gemm(cfg, sch):
    """Define (with a ``SpaceBuilder``) or apply (with a ``ConfigSource``) the GEMM space."""
    main, info, consumer = _prepare(sch)
    (m_name, m_ext), (n_name, n_ext), (k_name, k_ext) = info.m, info.n, info.k

    # -- knobs (fixed order; none depends on another's value) ------------------------------------
    tile_m = cfg.split(f"tile_{short_name(m_name)}", m_ext, 4)
    tile_n = cfg.split(f"tile_{short_name(n_name)}", n_ext, 4)
    tile_k = cfg.split(f"tile_{short_name(k_name)}", k_ext, 2, max_inner=MAX_K_TILE)
    pipeline = cfg.choice("pipeline", PIPELINES)
    transpose = cfg.choice("transpose", (True, False))
    pad = cfg.choice("pad", PADS)
    if isinstance(cfg, SpaceBuilder):  # defining the space: the knobs are all it needs
        return sch

    check_limits(info, tile_m, tile_n, tile_k, pipeline, transpose, pad)
    threads_y, threads_x = tile_m[2], tile_n[2]

    # -- write-back: the accumulator in registers, the epilogue fused -----------------------------
    if consumer is not None:
        sch.set_scope(main, 0, "local")
        write_back = consumer
        vector_out = _elementwise_of(sch, consumer, info)
    else:
        write_back = sch.cache_write(main, 0, "local")
        vector_out = True

    # -- tiling and binding ------------------------------------------------------------------------
    loops = dict(zip(info.loops, sch.get_loops(main)))
    outer = [loops[n] for n in info.loops if n not in (m_name, n_name, k_name)]
    m0, m1, m2, m3 = sch.split(loops[m_name], list(tile_m))
    n0, n1, n2, n3 = sch.split(loops[n_name], list(tile_n))
    k0, k1 = sch.split(loops[k_name], list(tile_k))
    sch.reorder(*outer, m0, n0, m1, n1, m2, n2, k0, k1, m3, n3)
    if outer:
        bz = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        sch.bind(bz, "blockIdx.z")
    sch.bind(m0, "blockIdx.y")
    sch.bind(n0, "blockIdx.x")
    sch.bind(m1, "vthread.y")
    sch.bind(n1, "vthread.x")
    sch.bind(m2, "threadIdx.y")
    sch.bind(n2, "threadIdx.x")

    sch.reverse_compute_at(write_back, n2, preserve_unit_loops=True)
    width = _vector_width(tile_n[3], n_ext) if vector_out else 1
    last = sch.get_loops(write_back)[-1]
    if width > 1 and _extent(sch, last) % width == 0:
        _, lanes = sch.split(last, [None, width])
        sch.vectorize(lanes)

    # -- shared-memory panels, copied cooperatively ------------------------------------------------
    is_async = pipeline.startswith("async")
    for operand, tile_mn in ((info.a, tile_m), (info.b, tile_n)):
        _stage_shared(sch, main, k0, operand, tile_mn, tile_k, threads_y, threads_x,
                      transpose, pad, pipeline, is_async)

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
    _verify(sch)
    return sch


def check_limits(info: GemmInfo, tile_m, tile_n, tile_k, pipeline: str, transpose: bool,
                 pad: int) -> dict:
    """Raise ``InvalidConfigError`` for a config that breaks a GPU limit; its geometry else."""
    threads = tile_m[2] * tile_n[2]
    vthreads = tile_m[1] * tile_n[1]
    accumulators = tile_m[1] * tile_m[3] * tile_n[1] * tile_n[3]
    bm, bn, bk = math.prod(tile_m[1:]), math.prod(tile_n[1:]), tile_k[1]
    if threads > MAX_THREADS:
        raise InvalidConfigError(f"{threads} threads per block exceed {MAX_THREADS}")
    if threads < min(WARP, info.m[1] * info.n[1]):
        raise InvalidConfigError(f"{threads} threads per block: less than a warp")
    if vthreads > MAX_VTHREADS:
        raise InvalidConfigError(f"{vthreads} virtual threads exceed {MAX_VTHREADS}")
    if accumulators > MAX_ACCUMULATORS:
        raise InvalidConfigError(f"accumulator of {accumulators} floats per thread exceeds "
                                 f"{MAX_ACCUMULATORS}")
    if tile_m[0] > MAX_GRID_YZ or math.prod(e for _, e in info.batch) > MAX_GRID_YZ:
        raise InvalidConfigError(f"more than {MAX_GRID_YZ} blocks along grid y or z")
    stages = {"none": 1, "double": 2, "prefetch": 1}.get(pipeline) or int(pipeline[-1])
    if pipeline != "none" and tile_k[0] < max(stages, 2):
        raise InvalidConfigError(f"{tile_k[0]} K tiles cannot fill a {pipeline} pipeline")
    shared = 0
    for operand, rows in ((info.a, bm), (info.b, bn)):
        k_major = transpose or not operand.k_inner
        inner, outer = (rows, bk) if k_major else (bk, rows)
        row = inner + (pad if pad < inner else 0)
        shared += 4 * stages * outer * row
    if shared > MAX_SHARED_BYTES:
        raise InvalidConfigError(f"{shared} B of shared memory exceed {MAX_SHARED_BYTES}")
    return {"threads": threads, "block": (bm, bn, bk), "shared_bytes": shared,
            "accumulators": accumulators, "stages": stages}


def _stage_shared(sch, main, k0, operand: Operand, tile_mn, tile_k, threads_y, threads_x,
                  transpose, pad, pipeline, is_async) -> None:
    """Copy ``operand``'s panel into shared memory at the K-tile loop: all threads of the
    block, in vectors along the operand's contiguous dimension, stored K-major unless the
    operand is K-contiguous and ``transpose`` is off."""
    from tvm.tirx import IndexMap

    index = _read_index(sch, main, operand.buffer)
    shared = sch.cache_read(main, index, "shared")
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
    serial, ty, tx = sch.split(fused, [None, threads_y, threads_x])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    if pipeline == "prefetch":
        # (the manifest pass wants serial loops above the copy: nvcc unrolls it)
        sch.annotate(shared, "tirx.manifest_shared_memory_local_stage", 1)
    else:
        sch.unroll(serial)


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
