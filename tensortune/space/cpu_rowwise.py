"""The CPU template for functions that are not one tiled reduction: elementwise and layout
copies (no reduction), row-wise reductions such as softmax, layer norm and RMS norm (several
reduction blocks over the same leading axes), and anything else (several outputs, a split, a
resize, a broadcast after a reduction).

Three shapes of schedule (knob ``rows``), the first two after TVM's dlight CPU reduction rule:

- rows ``r >= 1``: the output block's first ``r`` loops are fused into one parallel loop, and
  every block that shares those axes with it (same extents, and all its consumers share them
  too) is computed under it, so a row's statistics and its normalization stay in cache. The
  rest stays at the root, each on its own as below: a padded copy that every row reads, or an
  RMS norm's ``keepdims`` sum under a fused normalized axis (it would be redone per element);
- rows ``0``: every block on its own (``cpu_fallback``'s rule): its leading loops parallel. The
  only shape for functions with several outputs.

- rows ``tile8``, ``tile16``, ``tile32``, offered only where the output block reads a
  buffer's innermost axis along one of its outer axes (a transposing copy: an NHWC model's
  output made NCHW again, 256 channels x 6000 samples; a resize written channels-first):
  those two axes are cut into square tiles and the rest fused into one parallel loop over the
  tiles, so the lines a tile reads across are reused from L1 instead of fetched once per
  element written. The other blocks go apart.

In all, elementwise producers are inlined (knob ``inline``), each block's innermost loop is
split by ``vector`` lanes and vectorized, a reduction over the innermost axis is split into
``vector`` partial results (knob ``reduce``: ``rfactor``) or only unrolled, and the parallel
loop gets an unroll pragma (knob ``unroll``). Knob ``parallel`` may keep a small function on
one core (the seeds do below ``cpu_fallback.PARALLEL_WORK`` iterations).
"""
from __future__ import annotations

from .analysis import TemplateMismatch
from .config import Config
from .cpu_fallback import (PARALLEL_WORK, block_kinds, decompose, extent, fallback_blocks,
                           inline_elementwise, leading_spatial, reduction_style, split_reduction,
                           vectorize_inner, vectorize_outputs, vectorize_partial, work)
from .space import ConfigSpace, InvalidConfigError

VECTORS = (8, 16, 32, 0)  # inner split factor (0: leave the innermost loop scalar)
UNROLL_STEPS = (16, 0, 64)
REDUCTIONS = ("rfactor", "unroll")
APART = 0  # ``rows`` value: every block scheduled on its own
TILES = {"tile16": 16, "tile8": 8, "tile32": 32}  # ``rows`` values: a transposing copy in tiles

__all__ = ["rowwise_cpu", "rowwise_seeds", "block_kinds", "leading_spatial", "row_blocks"]


def rowwise_cpu(cfg, sch):
    """Define or apply the row-wise space on ``sch`` (see the module docstring)."""
    root = sch.get_sblock("root")
    blocks = list(sch.get_child_blocks(root))
    if not blocks:
        raise TemplateMismatch("the function has no blocks")
    kinds = [block_kinds(sch, b) for b in blocks]
    lead = output_rows(sch, blocks, kinds)
    rows_options = tuple(range(lead, 0, -1))
    if len(blocks) > 1 or not lead:
        # first, so that defining the space runs the rule that applies to any function
        rows_options = (APART,) + rows_options
    # found before inlining (the output block's loops stay; a producer inlined into it may
    # hide the transposing read behind its own indexing)
    transposed = transposed_axis(sch, blocks[-1])
    if transposed is not None:  # last: other spaces stay as they were
        rows_options += tuple(TILES)
    inline = cfg.choice("inline", (True, False)) if len(blocks) > 1 else False
    rows = cfg.choice("rows", rows_options)
    vector = cfg.choice("vector", VECTORS)
    reduce = cfg.choice("reduce", REDUCTIONS) if any("R" in k for k in kinds) else "unroll"
    parallel = cfg.choice("parallel", (True, False))
    unroll = cfg.choice("unroll", UNROLL_STEPS)

    if inline:
        for block in blocks[:-1]:
            inline_elementwise(sch, block)
    blocks = list(sch.get_child_blocks(root))
    if rows == APART:
        fallback_blocks(sch, blocks, vector, unroll, reduce, parallel)
        return sch
    if rows in TILES:
        fallback_blocks(sch, blocks[:-1], vector, unroll, reduce, parallel)
        tile_transpose(sch, blocks[-1], transposed, TILES[rows], vector, parallel, unroll)
        return sch
    loops = sch.get_loops(blocks[-1])
    if rows > len(loops):
        raise InvalidConfigError(f"rows {rows} exceeds the output's {len(loops)} loops")
    inside = row_blocks(sch, blocks, rows)
    # rfactor wants its block first under its loops: split the reductions while at the root
    for block in blocks[:-1]:
        if (reduce == "rfactor" and sch.get(block).name_hint in inside
                and reduction_style(sch, block) == "rfactor"):
            partial = split_reduction(sch, block, vector)
            if partial is not None:
                inside[sch.get(partial).name_hint] = "partial"
    blocks = list(sch.get_child_blocks(root))
    loops = sch.get_loops(blocks[-1])
    outer = sch.fuse(*loops[:rows]) if rows > 1 else loops[0]
    if parallel:
        sch.parallel(outer)
    if unroll:
        sch.annotate(outer, "pragma_auto_unroll_max_step", unroll)
        sch.annotate(outer, "pragma_unroll_explicit", 1)
    apart = [b for b in blocks[:-1] if sch.get(b).name_hint not in inside]
    for block in reversed(blocks[:-1]):
        if sch.get(block).name_hint in inside:
            sch.compute_at(block, outer, preserve_unit_loops=True)
    for block in blocks:
        last = sch.get(block).same_as(sch.get(blocks[-1]))
        role = inside.get(sch.get(block).name_hint, "output" if last else None)
        if role == "partial":
            vectorize_partial(sch, block)
        elif role is None:
            continue
        elif "R" in block_kinds(sch, block) and reduction_style(sch, block) == "spatial":
            decompose(sch, block, vectorize_outputs(sch, block, vector))
        else:
            vectorize_inner(sch, block, vector, outer)
    fallback_blocks(sch, apart, vector, unroll, reduce, parallel)
    return sch


def transposed_axis(sch, block) -> int | None:
    """The position of the outer iterator of ``block`` (all spatial, bound to its loops in
    order) that indexes the innermost axis of a buffer it reads while its own innermost
    iterator indexes another axis of that buffer: a transposing copy; else None."""
    stmt = sch.get(block)
    ivs = list(stmt.iter_vars)
    if len(ivs) < 2 or len(sch.get_loops(block)) != len(ivs) \
            or any(int(iv.iter_type) != 0 for iv in ivs):
        return None
    inner = ivs[-1].var
    for region in stmt.reads:
        dims = list(region.region)
        last = region.source.shape[-1]
        if len(dims) < 2 or not hasattr(last, "value") or int(last) < 2:
            continue
        others = [d.min for d in dims[:-1]]
        if not any(m.same_as(inner) for m in others):
            continue
        for i, iv in enumerate(ivs[:-1]):
            if dims[-1].min.same_as(iv.var) and int(iv.dom.extent) > 1:
                return i
    return None


def tile_transpose(sch, block, a: int, tile: int, vector: int, parallel: bool,
                   unroll: int) -> None:
    """The transposed axis ``a`` and the innermost one of ``block`` cut by ``tile`` (an axis
    that ``tile`` does not divide stays whole, inside), the tiles and every other loop fused
    into one parallel loop, the innermost axis vectorized."""
    loops = sch.get_loops(block)
    b = len(loops) - 1
    inner, outer = [], [loops[i] for i in range(len(loops)) if i not in (a, b)]
    for i in (a, b):
        n = extent(sch, loops[i])
        if n > tile and n % tile == 0:
            o, i_ = sch.split(loops[i], [None, tile])
            outer.append(o)
            inner.append(i_)
        else:
            inner.append(loops[i])
    sch.reorder(*outer, *inner)
    fused = (sch.fuse(*outer) if len(outer) > 1 else outer[0]) if outer else None
    if fused is not None:
        if parallel:
            sch.parallel(fused)
        if unroll:
            sch.annotate(fused, "pragma_auto_unroll_max_step", unroll)
            sch.annotate(fused, "pragma_unroll_explicit", 1)
    vectorize_inner(sch, block, vector, fused)


def output_rows(sch, blocks, kinds) -> int:
    """How many leading loops of the output block ``rows`` can fuse (its leading spatial
    axes); 0 where the function has no single last output block."""
    outputs = sch.get_output_blocks(sch.get_sblock("root"))
    if len(outputs) != 1 or not sch.get(outputs[0]).same_as(sch.get(blocks[-1])):
        return 0
    return min(leading_spatial(kinds[-1]), len(sch.get_loops(blocks[-1])))


def row_blocks(sch, blocks, rows: int) -> dict:
    """``{name: "row"}`` of the blocks (the output aside) that share the output's first
    ``rows`` axes (spatial, same extents) and whose consumers all do: those computed under
    the row loop."""
    out = [int(iv.dom.extent) for iv in sch.get(blocks[-1]).iter_vars][:rows]
    inside: dict = {}
    names = {sch.get(blocks[-1]).name_hint}
    for block in reversed(blocks[:-1]):
        ivs = list(sch.get(block).iter_vars)[:rows]
        shares = (len(ivs) == rows and all(int(iv.iter_type) == 0 for iv in ivs)
                  and [int(iv.dom.extent) for iv in ivs] == out)
        consumers = [sch.get(c).name_hint for c in sch.get_consumers(block)]
        if shares and all(c in names for c in consumers):
            inside[sch.get(block).name_hint] = "row"
            names.add(sch.get(block).name_hint)
    return inside


def rowwise_seeds(space: ConfigSpace, prim_func, lanes: int = 16, threads: int = 2,
                  limit: int = 12) -> list[Config]:
    """Configs to try first: producers inlined; leading rows that give every core several and
    keep the most blocks under them, or every block apart where no row is shared or a
    reduction cannot be vectorized; one vector per step,
    reductions split into lanes; then variants (two vectors, reductions only unrolled, all
    rows fused, the other shape). One core below ``PARALLEL_WORK`` iterations."""
    from tvm.s_tir import Schedule

    knobs = {k.name: k for k in space.knobs}
    options = knobs["rows"].options
    sch = Schedule(prim_func)
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    out = [int(iv.dom.extent) for iv in sch.get(blocks[-1]).iter_vars]
    row_options = sorted(r for r in options if r != APART and r not in TILES)

    def row_count(r):
        size = 1
        for e in out[:r]:
            size *= e
        return size

    # enough rows for every core (the innermost loop left for the vector), then as many
    # blocks under them as can share them (the Winograd input transform: its row stage under
    # the first axis, 1.7x faster on one core than every block apart), then more rows
    fits = [r for r in row_options if row_count(r) >= 2 * threads and r < len(out)]
    best = max(fits, key=lambda r: (len(row_blocks(sch, blocks, r)), r), default=APART)
    # a reduction no vector divides (a softmax over 197 tokens) is vectorized only with
    # every block apart (its last chunk peeled: ``cpu_fallback.peel_ragged``); TVM's
    # ``compute_at`` would drop the chunk's bounds test. 6x197x197 softmax, two cores:
    # 135 us apart, 260 us by rows with scalar reductions
    ragged = any(_ragged(sch, b, lanes) for b in blocks)
    shapes = [best] if best != APART and not ragged else []
    shapes += [APART] if APART in options else []
    shapes += [r for r in (best, row_options[-1] if row_options else None)
               if r is not None and r not in shapes]
    variants = [(lanes, "rfactor"), (2 * lanes, "rfactor"), (lanes, "unroll")]
    parallel = work(sch) >= PARALLEL_WORK
    found: dict[Config, None] = {}
    # a transposing copy: its tiles first (a WaveNet's 256 x 6000 output: 1.39 ms by rows,
    # 0.18 ms in tiles of 16)
    shapes = [r for r in TILES if r in options] + shapes
    for rows in shapes:
        for vector, reduce in variants:
            values = {"rows": rows, "vector": vector, "unroll": 16}
            if "inline" in knobs:
                values["inline"] = True  # costly producers of two consumers stay apart
            if "reduce" in knobs:
                values["reduce"] = reduce
            values["parallel"] = parallel
            config = Config(values)
            if config in space:
                found[config] = None
    return list(found)[:limit]


def _ragged(sch, block, lanes: int) -> bool:
    """Whether ``block`` reduces over an innermost axis longer than a vector that no whole
    vector divides (``rfactor`` then leaves it scalar)."""
    ivs = sch.get(block).iter_vars
    if not len(ivs) or int(ivs[-1].iter_type) != 2:
        return False
    n = int(ivs[-1].dom.extent)
    return n > lanes and n % lanes != 0
