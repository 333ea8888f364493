"""The generic CPU template: multi-level tiling for any single-reduction TIR function.

Loop structure of the main (reduction) block, after AutoTVM/MetaSchedule's CPU practice:

    S0 (parallel) . S1 . R0 . S2 . R1 . S3 (register tile; its last loop is vectorized)

with a local accumulator written back at S1 or S0, padding and other producers inlined or
computed up front, elementwise consumers fused into the write-back, optional packing of input
operands (copied per tile, the vectorized dimension moved innermost), and an unroll pragma.
"""
from __future__ import annotations

from .analysis import (TemplateMismatch, analyze, inline_epilogue, inline_side_producers,
                       is_tiled, pad_ragged, short_name)
from .cpu_attention import attention_cpu, is_attention
from .cpu_expand_depthwise import expand_depthwise_cpu, is_expand_depthwise
from .cpu_recurrent import is_recurrence, recurrent_cpu
from .cpu_rowwise import rowwise_cpu
from .loops import extent, vectorize_vectors
from .space import InvalidConfigError

VECTOR_MAX = 64  # lanes of one vectorized inner loop (LLVM splits into zmm registers)
REGISTER_TILE_MAX = 512  # elements of the unrolled S3 tile; beyond this only spills remain
UNROLL_STEPS = (0, 16, 64, 512)
OUTER_MODES = ("S1/1", "S0/1", "S1/2")  # write-back level / number of fused parallel levels
PACK_LEVELS = ("none", "root", "S1", "R0")  # where an input operand is copied into panel layout
PREPACK_ANNOTATION = "meta_schedule.layout_rewrite_preproc"  # what TVM's split pass looks for
# a vector axis choice's suffix: the producers read along that axis (a convolution's padded
# input) are made up front with it innermost, so the vector loads are contiguous
COPY = "/copy"
COPY_CHANNELS = 16  # output channels below which it is offered: fewer than one AVX-512 vector
# float32 weights a core keeps in L2 while the chunks that share them run (1 MiB: EfficientNet's
# 192 -> 1152 layer, 0.9 MB, ran 25% slower weights-first; 8-9 MB layers ran 2-2.7x faster)
WEIGHTS_CACHED = 1 << 18


def generic_cpu(cfg, sch):
    """Define (with a ``SpaceBuilder``) or apply (with a ``ConfigSource``) the CPU space: the
    tiling below for one reduction, ``cpu_expand_depthwise`` for a fused expand-then-depthwise
    pair, ``cpu_attention`` for fused attention, ``cpu_recurrent`` for a fused recurrent
    layer, ``cpu_rowwise`` for everything else."""
    from tvm.tirx import IndexMap

    if is_expand_depthwise(sch):
        return expand_depthwise_cpu(cfg, sch)
    if is_attention(sch):
        return attention_cpu(cfg, sch)
    if is_recurrence(sch):
        return recurrent_cpu(cfg, sch)
    if not is_tiled(sch):
        return rowwise_cpu(cfg, sch)
    pads = pad_ragged(sch, cfg.lanes)  # 197 rows as 200: a register tile of rows divides them
    info = analyze(sch)  # again: padding may rename the block's iterators
    main = sch.get_sblock(info.name)
    padded = {sch.get(p).writes[0].source.name for p in pads}
    producers = [p for p in sch.get_producers(main) if sch.get(p).writes[0].source.name
                 not in padded] + [q for p in pads for q in sch.get_producers(p)]
    spatial_names = [n for n, _ in info.spatial]
    vec_options = [n for n, e in info.spatial if e > 1] or spatial_names[-1:]

    # -- knobs (fixed order; none depends on another's value) ------------------------------------
    s_tiles = [cfg.split(f"tile_{short_name(n)}", e, 4, max_inner=VECTOR_MAX) for n, e in info.spatial]
    r_tiles = [cfg.split(f"tile_{short_name(n)}", e, 2) for n, e in info.reduce]
    # only where the output has fewer channels than a vector: an innermost axis of under 16
    # that no producer is read along (channels-last output channels, read through the
    # weights alone; not an NCHW image row); every other space stays as it was
    last = info.spatial[-1]
    narrow = last[1] < COPY_CHANNELS and not _copied_along(sch, producers, info, last[0], True)
    copies = {n: _copied_along(sch, producers, info, n) if narrow else {} for n in vec_options}
    vec_choice = cfg.choice("vector_axis", tuple(short_name(n) for n in vec_options[::-1])
                            + tuple(short_name(n) + COPY for n in vec_options[::-1] if copies[n]))
    vec_axis = vec_options[[short_name(n) for n in vec_options].index(vec_choice.removesuffix(COPY))]
    copied = copies[vec_axis] if vec_choice.endswith(COPY) else {}
    outer = cfg.choice("outer", OUTER_MODES)
    producer_at = cfg.choice("producer_at", ("inline", "root")) if producers or pads else None
    packable = [name for name, _, is_param in info.reads if is_param]
    packs = {name: cfg.choice(f"pack_{name}", PACK_LEVELS) for name in packable}
    unroll = cfg.choice("unroll", UNROLL_STEPS)

    vi = spatial_names.index(vec_axis)
    tile_elems = 1
    for t in s_tiles:
        tile_elems *= t[-1]
    if tile_elems > REGISTER_TILE_MAX:
        raise InvalidConfigError(f"register tile of {tile_elems} elements exceeds {REGISTER_TILE_MAX}")
    write_level, parallel_levels = outer.split("/")

    # -- producers and consumers --------------------------------------------------------------
    root_producers = []
    for p in producers:
        name = sch.get(p).writes[0].source.name
        if name in copied:
            _copy_last(sch, p, copied[name])
            root_producers.append(p)
        elif producer_at == "inline":
            sch.compute_inline(p)
        else:
            root_producers.append(p)
    for p in pads:
        # a zero-padded copy read along the vectorized axis is made up front: inlined, its
        # condition would turn each vector load into scalar ones (4 instead of 90 GFLOP/s)
        name = sch.get(p).writes[0].source.name
        dims = next(d for n, d, _ in info.reads if n == name)
        if {r.source.name for r in sch.get(p).reads} <= info.layout_free:
            # a constant weight's padded copy is made once, when the model is built
            sch.annotate(p, PREPACK_ANNOTATION, True)
            root_producers.append(p)
        elif producer_at == "inline" and not any(vec_axis in used for used in dims):
            sch.compute_inline(p)
        else:
            root_producers.append(p)
    inline_epilogue(sch, main)  # SiLU, GELU: x used twice, a chain once inlined
    inline_side_producers(sch, main)  # a residual's own bias, added beside the epilogue
    consumers = list(sch.get_consumers(main))
    # fold an elementwise chain into its first member, which becomes the write-back
    while len(consumers) == 1 and len(sch.get_consumers(consumers[0])) == 1:
        sch.reverse_compute_inline(sch.get_consumers(consumers[0])[0])
    if len(consumers) == 1:
        write_back = consumers[0]
    elif not consumers:
        write_back = sch.cache_write(main, 0, "global")
    else:
        raise TemplateMismatch(f"block {info.name} has {len(consumers)} consumers")

    # -- tiling -------------------------------------------------------------------------------------
    loops = sch.get_loops(main)
    n_s, n_r = len(info.spatial), len(info.reduce)
    s_loops = [sch.split(loops[i], list(s_tiles[i])) for i in range(n_s)]
    r_loops = [sch.split(loops[n_s + j], list(r_tiles[j])) for j in range(n_r)]
    s3 = [s_loops[i][3] for i in range(n_s) if i != vi] + [s_loops[vi][3]]
    # the parallel chunks: with the weights the larger operand, the vectorized axis (the
    # weights' columns) outermost, so each core streams its share of the weights once and the
    # chunks after it reuse the panel from cache (a 7x7x768 -> 3072 layer read its 9.4 MB of
    # weights once per image row otherwise)
    s0_axes = [vi] + [i for i in range(n_s) if i != vi] \
        if _weights_first(sch, main, info, vec_axis) else list(range(n_s))
    order = ([s_loops[i][0] for i in s0_axes] + [s_loops[i][1] for i in s0_axes]
             + [r[0] for r in r_loops] + [s[2] for s in s_loops] + [r[1] for r in r_loops] + s3)
    sch.reorder(*order)
    level = {"S0": s_loops[s0_axes[-1]][0], "S1": s_loops[s0_axes[-1]][1],
             "R0": r_loops[-1][0] if n_r else None}
    sch.reverse_compute_at(write_back, level[write_level], preserve_unit_loops=True)
    if vi != n_s - 1:
        # keep the accumulator's vectorized dimension contiguous, whatever the output layout
        perm = [d for d in range(n_s) if d != vi] + [vi]
        sch.transform_layout(main, ("write", 0), IndexMap.from_func(_permutation(perm), ndim=n_s))

    s3_axes = [spatial_names[i] for i in range(n_s) if i != vi] + [vec_axis]
    s3_tiles = {spatial_names[i]: s_tiles[i][-1] for i in range(n_s)}
    for name, dims, _ in info.reads:
        where = packs.get(name, "none")
        if where == "none" or (where == "R0" and not n_r):
            continue
        _pack(sch, main, name, dims, None if where == "root" else level[where], s3_axes, s3_tiles,
              prepack=where == "root" and name in info.layout_free)

    # -- parallel, unroll, vectorize -------------------------------------------------------------
    fuse = [s_loops[i][0] for i in s0_axes] + ([s_loops[i][1] for i in s0_axes]
                                               if parallel_levels == "2" else [])
    outer_loop = sch.fuse(*fuse) if len(fuse) > 1 else fuse[0]
    sch.parallel(outer_loop)
    if unroll:
        sch.annotate(outer_loop, "pragma_auto_unroll_max_step", unroll)
        sch.annotate(outer_loop, "pragma_unroll_explicit", 1)
    for loop in s3[:-1]:
        if extent(sch, loop) > 1:
            sch.unroll(loop)
    if s_tiles[vi][-1] > 1:
        vectorize_vectors(sch, s3[-1])
    if n_r:
        sch.decompose_reduction(main, r_loops[0][0])
    # the epilogue (bias, SiLU's fast_exp, GELU's fast_erf) runs in vectors along the output's
    # last axis, split as the register tile is (24 lanes: 3 x 8); a write-back at S0 spans
    # more than VECTOR_MAX lanes and becomes a loop of vectors instead of scalar code
    vectorize_vectors(sch, _at_most_max(sch, sch.get_loops(write_back)[-1]))
    for p in root_producers:
        p_loops = sch.get_loops(p)
        sch.parallel(sch.fuse(*p_loops[:2]) if len(p_loops) > 2 else p_loops[0])
        if len(p_loops) > 1 and 1 < extent(sch, p_loops[-1]) <= 1024:
            # a copy along 512 channels as one <512 x float> took LLVM 5-7 s to compile
            # (SqueezeNet's classifier, against 0.2 s in 64-lane pieces): past the build limit
            sch.vectorize(_at_most_max(sch, p_loops[-1]))
    return sch


def _at_most_max(sch, loop):
    """``loop``, or the inner part of it split to at most ``VECTOR_MAX`` lanes (its largest
    divisor up to that): what one vectorized loop should span."""
    lanes = extent(sch, loop)
    if lanes <= VECTOR_MAX:
        return loop
    width = max(d for d in range(1, VECTOR_MAX + 1) if lanes % d == 0)
    return sch.split(loop, [None, width])[1]


def _copied_along(sch, producers, info, axis: str, any_dim: bool = False) -> dict[str, int]:
    """The producers (by buffer name) that ``main`` reads along ``axis`` in a dimension other
    than their last (in any dimension with ``any_dim``), each with that dimension: a 12-channel
    NDHWC convolution vectorized along its image rows reads its padded input ``C`` floats
    apart otherwise."""
    names = {sch.get(p).writes[0].source.name for p in producers}
    found = {}
    for name, dims, _ in info.reads:
        if name not in names:
            continue
        along = [d for d, used in enumerate(dims) if axis in used]
        if len(along) == 1 and (any_dim or along[0] != len(dims) - 1):
            found[name] = along[0]
    return found


def _copy_last(sch, producer, dim: int) -> None:
    """Lay out ``producer``'s output with dimension ``dim`` innermost, written in that order."""
    from tvm.tirx import IndexMap

    ndim = len(sch.get(producer).writes[0].source.shape)
    perm = [d for d in range(ndim) if d != dim] + [dim]
    sch.transform_layout(producer, ("write", 0), IndexMap.from_func(_permutation(perm), ndim=ndim))
    loops = sch.get_loops(producer)
    if len(loops) == ndim:
        sch.reorder(*[loops[d] for d in perm])


def _weights_first(sch, main, info, vec_axis: str) -> bool:
    """Whether the operands read along ``vec_axis`` and no other spatial axis (a layer's
    weights) hold more elements than those not read along it (its activations), and too many
    to stay in a core's L2 cache between the chunks that share them."""
    others = {n for n, e in info.spatial if e > 1 and n != vec_axis}
    dims = {name: d for name, d, _ in info.reads}
    weights = activations = 0
    for region in sch.get(main).reads:
        buf = region.source
        used = dims.get(buf.name)
        if used is None:
            continue
        size = 1
        for d in buf.shape:
            size *= int(d)
        names = set().union(*used) if used else set()
        if vec_axis in names and not names & others:
            weights += size
        elif vec_axis not in names:
            activations += size
    return weights > activations and weights > WEIGHTS_CACHED


def _pack(sch, main, name, dims, loop, s3_axes, s3_tiles, prepack: bool = False) -> None:
    """Copy operand ``name`` (whole at root, or the tile's region under ``loop``) into a panel
    layout: the dimension of the innermost register-tile axis it is indexed by is split by that
    tile and its remainder made innermost, so the micro-kernel streams the copy contiguously.

    ``prepack`` (a whole copy of a constant weight) marks the copy as MetaSchedule's layout
    rewrite: it is split off the function and run once at compile time (``measure.prepack``
    when timing a candidate, ``SplitLayoutRewritePreproc`` and ``FoldConstant`` in a model)."""
    from tvm.tirx import IndexMap

    read_index = [r.source.name for r in sch.get(main).reads].index(name)
    packed = sch.cache_read(main, read_index, "global")
    if prepack:
        sch.annotate(packed, PREPACK_ANNOTATION, True)
    if loop is not None:
        sch.compute_at(packed, loop, preserve_unit_loops=True)
    ndim = len(dims)
    pure = {next(iter(used)): d for d, used in enumerate(dims) if len(used) == 1}
    inner = [a for a in reversed(s3_axes) if a in pure and (s3_tiles[a] > 1 or a == s3_axes[-1])]
    p_loops = sch.get_loops(packed)[-ndim:]
    if inner:
        d, tile = pure[inner[0]], s3_tiles[inner[0]]
        others = [o for o in range(ndim) if o != d]
        index_map = IndexMap.from_func(_panel(d, others, tile), ndim=ndim)
        # the map is a bijection (split + permutation); TVM cannot prove that for floordiv
        sch.transform_layout(packed, ("write", 0), index_map, assume_injective_transform=True)
        outer, rest = sch.split(p_loops[d], [None, tile])
        sch.reorder(outer, *[p_loops[o] for o in others], rest)
    loops = sch.get_loops(packed)
    if 1 < extent(sch, loops[-1]) <= VECTOR_MAX:
        sch.vectorize(loops[-1])
    if loop is None:
        sch.parallel(loops[0])


def _panel(d, others, tile):
    return lambda *idx: [idx[d] // tile] + [idx[o] for o in others] + [idx[d] % tile]


def _permutation(perm):
    return lambda *idx: [idx[d] for d in perm]
