"""Seed configs: what an expert would try first in ``cpu.generic``'s space.

A tuner with a few dozen trials per task (a model's budget shared by its tasks) cannot find a
register tile by random sampling: most of the space spills, streams a weight the wrong way or
leaves a core idle. These seeds encode the oneDNN / BLIS recipe for one reduction block:

- vectorize the output's innermost axis (channels in NHWC, columns in a matmul) with a register
  tile of ``V`` = 1-4 vectors, and unroll a second spatial axis by ``U`` so that ``U x V/lanes``
  accumulators fill the vector registers but two;
- stream the innermost reduction (input channels, ``k``) inside the tile, the other reduction
  axes (the kernel window) outside it, but inside it too where the channels are few (a stem's
  3 colours, ResNeXt's groups of 4) or one (depthwise);
- give the next level (``S2``) a cache block of the output (up to 64 channels by 64 positions),
  and the parallel level every remaining outer iteration, so both cores get many chunks;
- pack constant weights into the tile's panel layout once (``pack_* = root``) and inline
  padding (a stem's is made up front).

Rows or columns that no register tile divides (ViT's 197 tokens, a prime) are padded first, as
the template pads them (``analysis.pad_ragged``: 200 rows, ten to a tile, not one). A handful
of variants (vector width, accumulator rows, reduction blocking, unroll, padding) make the
first batch; the cost model and the search refine from there. Every seed is checked
against the space, so a shape the recipe does not fit just yields fewer seeds.
"""
from __future__ import annotations

import itertools
import math

from .analysis import (WIDE_TILE, analyze, group_width, is_tiled, pad_ragged, short_name,
                       vector_registers)
from .cpu_attention import attention_seeds, is_attention
from .cpu_expand_depthwise import expand_depthwise_seeds, is_expand_depthwise
from .cpu_recurrent import is_recurrence, recurrent_seeds
from .cpu_rowwise import rowwise_seeds
from .config import Config
from .cpu_template import COPY, VECTOR_MAX
from .space import ConfigSpace

ACCUMULATOR_TILE_MAX = 4096  # floats of the S2 x S3 output block, kept in L1 across R0
RAGGED_UNROLL = 512  # the unroll knob's largest step: a whole ragged register tile
STEM_CHANNELS = 8  # an innermost reduction shorter than this is a stem's (RGB: 3)
# fewer accumulators than this in every tile: a single position gets up to WIDE_VECTORS
# vectors, with a reduction block whose weight panel (block x lanes floats) stays in L1
FEW_ACCUMULATORS, WIDE_VECTORS, WIDE_PANEL = 6, 8, 6144


def cpu_seeds(space: ConfigSpace, prim_func, lanes: int = 8, threads: int = 2,
              limit: int = 12) -> list[Config]:
    """Up to ``limit`` distinct configs of ``space`` (``cpu.generic`` on ``prim_func``) built by
    the recipe above for ``lanes``-wide float vectors and ``threads`` cores: first one per
    register-tile shape, then variants of those."""
    from tvm.s_tir import Schedule

    sch = Schedule(prim_func)
    if is_expand_depthwise(sch):
        return expand_depthwise_seeds(space, sch, lanes)[:limit]
    if is_attention(sch):
        return attention_seeds(space, sch, lanes)[:limit]
    if is_recurrence(sch):
        return recurrent_seeds(space, sch, lanes)[:limit]
    if not is_tiled(sch):
        return rowwise_seeds(space, prim_func, lanes, threads, limit)
    pad_ragged(sch, lanes)  # the template's padded extents
    info = analyze(sch)
    knobs = {k.name: k for k in space.knobs}
    spatial = [(short_name(n), e) for n, e in info.spatial]
    reduce = [(short_name(n), e) for n, e in info.reduce]
    movable = [n for n, e in spatial if e > 1]
    if not movable:
        return []
    hint = short_name(info.vector_axis) if info.vector_axis else None
    if hint in movable:  # a block that names its vector axis (``tasks.grouped``)
        movable = [n for n in movable if n != hint] + [hint]
    vec = movable[-1]  # the output's innermost axis: contiguous in memory
    rows = movable[-2] if len(movable) > 1 else None
    rows2 = movable[-3] if len(movable) > 2 else None  # image rows, when ``rows`` is columns
    ext = dict(spatial)
    group = group_width(sch, info, vec)
    seeds = _oriented(space, knobs, info, spatial, reduce, vec, vec, rows, rows2, lanes, threads,
                      limit, group, _unfolded_table(sch, info, vec))
    copied = f"{rows}{COPY}"
    if rows and ext[vec] < lanes and copied in knobs["vector_axis"].options and \
            max(_vector_tiles(ext[rows], lanes)) >= lanes // 2:
        # fewer output channels than a vector (a 3-D U-Net's 12): vectorize the image rows
        # instead (when half a vector divides them), read from a padded copy laid out
        # rows-innermost, the channels unrolled
        other = _oriented(space, knobs, info, spatial, reduce, copied, rows, vec, None, lanes,
                          threads, limit)
        seeds = [c for pair in itertools.zip_longest(seeds, other) for c in pair if c is not None]
    return list(dict.fromkeys(seeds))[:limit]


def _oriented(space, knobs, info, spatial, reduce, choice, vec, rows, rows2, lanes, threads,
              limit, group: int | None = None, table: bool = False) -> list[Config]:
    """The recipe's seeds for one vector axis (``choice``, the knob's value for ``vec``). A
    grouped convolution's (``group`` outputs per group) register tile stays inside one group,
    where the input is a broadcast: a vector across groups is a gather that LLVM scalarizes.
    With a ``table`` that would not fold, producers are made up front first (``_unfolded_table``)."""
    ext = dict(spatial)
    regs = vector_registers(lanes)
    tiles = []  # (V, {row axis: unroll}): register tiles, the fullest first
    grouped = group and group > 1 and ext[vec] % group == 0
    for v_tile in _vector_tiles(group if grouped else ext[vec], lanes):
        vecs = vector_pieces(v_tile, lanes)
        # two W vectors and a broadcast stay in registers at regs - 4 accumulators; with 32
        # registers regs - 2 still pays when it is the only way to more than a few rows (a 7x7
        # layer). With AVX2's 16 it spills: on Zen 3, ResNeXt-50's 1x1 convolutions ran 14
        # accumulators (7 rows x 2 vectors) 1.2-1.5x slower than 8 (2 x 2 rows x 2 vectors) at
        # 14x14, and than 7 (7 rows x 1 vector) at 7x7
        candidates = []
        for most in (regs - 4, regs - 2) if regs >= 32 else (regs - 4,):
            candidates += [{rows: u} for u in _row_tiles(ext[rows], max(1, most // vecs))] \
                if rows else [{}]
            if most == regs - 4 and rows2:  # a 2-D tile: 2 x 2 positions where 4 won't divide
                square = _square_tile(ext[rows2], ext[rows], most // vecs)
                if square:
                    candidates.insert(1, {rows2: square[0], rows: square[1]})
        for unrolled in candidates:
            if (v_tile, unrolled) not in tiles:
                tiles.append((v_tile, unrolled))
    wide = _single_position_tile(tiles, ext, vec, rows, lanes) if not grouped else None
    if wide:
        tiles.insert(0, (wide, {rows: 1}))
    # the kernel window (every reduction but the innermost) streams inside the register tile
    # when the innermost reduction is trivial (depthwise) or short, outside it otherwise. With
    # the window outside, a stem's accumulators went to memory and back after every 3 FMAs (its
    # 3 colours): on Zen 3 7x7 stems ran 2-2.3x slower, 3x3 ones 1.2-2x, ResNeXt's packed groups
    # of 4 channels 1.25x. A stem's padding is made up front: inlined, every broadcast of the
    # window checks bounds. ViT's 16x16 patch embedding (768 reductions) was level either way.
    stem = len(reduce) > 2 and 1 < reduce[-1][1] < STEM_CHANNELS
    window_inside = not reduce or reduce[-1][1] == 1 or stem
    base = {"r_block": 512, "unroll": 16, "inline": not (stem or table),
            "window_inside": window_inside, "blocked": True}
    variants = [{}, {"window_inside": not window_inside}, {"r_block": 128},
                {"inline": not base["inline"]}, {"unroll": 64}]
    if stem:  # the whole window in the tile, no S2 block; then the recipe for other layers
        variants[1:2] = [{"blocked": False}, {"window_inside": False, "inline": True}]
    out: dict[Config, None] = {}
    for change in variants:
        for v_tile, unrolled in tiles:
            # a ragged tile (29 lanes: 16 + 8 + 4 + 1) vectorizes only when LLVM sees it
            # whole: unrolled all through, with no cache block around it (10x otherwise)
            ragged = _ragged(v_tile, lanes)
            if ragged and "unroll" in change:
                continue
            opts = {**base, **({"unroll": RAGGED_UNROLL} if ragged else {}), **change}
            r_block = min(opts["r_block"], WIDE_PANEL // v_tile) if v_tile == wide \
                else opts["r_block"]
            values = _config(spatial, reduce, vec, rows, v_tile, unrolled, r_block,
                             opts["window_inside"], threads,
                             blocked=opts["blocked"] and not ragged)
            values.update(_choices(knobs, info, choice, opts["unroll"], opts["inline"]))
            config = Config(values)
            if config in space:
                out[config] = None
            if len(out) >= limit:
                return list(out)
    return list(out)


def _single_position_tile(tiles, ext: dict, vec: str, rows: str | None,
                          lanes: int) -> int | None:
    """A wider vector tile for one position where rows allow no register tile: Inception's
    17x17 layers (17 is prime) got 1 position x 1-4 vectors, too few accumulators to hide the
    FMA's latency (31-45% of the peak). One position x 5-8 vectors (the most up to
    ``WIDE_VECTORS`` that divide the channels, within the space's ``VECTOR_MAX`` lanes), its
    weight panel kept in L1 (``WIDE_PANEL``), ran 1.2-1.8x faster (1x7, 7x1 and 3x3 layers of
    160-288 channels, Zen 3). None where a tile already holds ``FEW_ACCUMULATORS``."""
    if not rows or ext[rows] < 2 or any(
            vector_pieces(v, lanes) * math.prod(u.values()) >= FEW_ACCUMULATORS for v, u in tiles):
        return None
    best = next((m * lanes for m in range(WIDE_VECTORS, 1, -1)
                 if m * lanes <= VECTOR_MAX and ext[vec] % (m * lanes) == 0), None)
    return best if best and all(best > v for v, _ in tiles) else None


def _unfolded_table(sch, info, vec: str) -> bool:
    """Whether the main block reads a table its function computes from nothing (Winograd's
    output matrix ``A``, ``6 x 4``: a chain of 24 selects on ``y % 4``, ``x % 4``) and has an
    output axis no multiple of the table's last extent. Inlined, the chain folds to constants
    only where the rows are such multiples (56x56: inlining is the faster); at 147x147 (3 x 7
    x 7) it ran per multiply-add: Inception's output transform took 5-22 ms from inlining
    seeds, 1.1-2.5 ms with the table made up front (Zen 3)."""
    main = sch.get_sblock(info.name)
    for p in sch.get_producers(main):
        block = sch.get(p)
        if block.reads or not block.writes:
            continue
        step = int(block.writes[0].source.shape[-1])
        if step > 1 and any(e > 1 and e % step for n, e in info.spatial
                            if short_name(n) != vec):
            return True
    return False


def _vector_tiles(extent: int, lanes: int) -> list[int]:
    """Register-tile widths for the vectorized axis: the first three of 2, 1, 3 or 4 whole
    vectors that divide it, and 5 with AVX2 (3 x 8 lanes with 4 rows is AVX2's classic
    12-accumulator tile), else of half vectors, 2.5 and 3.5 vectors included (120 channels
    with AVX-512: 8, 24 and 40 lanes, not a 30-lane vector and a half; RegNet's 440: 8 and 40,
    where 10 lanes ran at a third of the peak), else quarter vectors (116 channels: 4 lanes,
    with many rows) and its largest divisor up to two vectors (58 channels: 29 lanes)."""
    # AVX2 adds 5 vectors (440 channels: 55 vectors; 2 positions x 5 vectors = 10 accumulators)
    wide = (WIDE_TILE,) if vector_registers(lanes) <= 16 else ()
    for width, multiples in ((lanes, (2, 1, 3, 4, *wide)), (lanes // 2, (2, 1, 3, 5, 4, 7))):
        whole = [m * width for m in multiples if width >= 4 and extent % (m * width) == 0]
        if whole:
            return whole[:3]
    quarter = lanes // 4
    parts = [m * quarter for m in (2, 1, 3) if quarter >= 4 and extent % (m * quarter) == 0]
    widened = next((w for w in range(extent, 0, -1) if extent % w == 0 and _widened(w, lanes)),
                   None)
    largest = max(d for d in range(1, min(extent, 2 * lanes) + 1) if extent % d == 0)
    return list(dict.fromkeys([*([widened] if widened else []), *parts[:2], largest]))


def _widened(width: int, lanes: int) -> bool:
    """Whether a ``width``-lane vector is one half-width register that LLVM widens (6 lanes
    of 16 run as one 8-lane register, 75% used), where 12 lanes split into three 4-lane
    pieces: a 3-D U-Net's 24 -> 12 channel convolution ran 1.7x slower with 12 than with 6."""
    return lanes // 4 < width < lanes // 2 and width & (width - 1) != 0


def _ragged(width: int, lanes: int) -> bool:
    """Whether a row of the tile ends in more than one partial vector."""
    rest = width % lanes
    return rest & (rest - 1) != 0 and not _widened(width, lanes)


def vector_pieces(width: int, lanes: int) -> int:
    """Registers one row of a ``width``-lane tile takes: whole vectors, then LLVM splits the
    rest into power-of-two pieces (29 lanes of 16: 16 + 8 + 4 + 1, four registers), but
    widens a lone half vector (``_widened``)."""
    if _widened(width, lanes):
        return 1
    return width // lanes + bin(width % lanes).count("1")


def _row_tiles(extent: int, most: int) -> list[int]:
    """Unrolled rows: the largest divisor of ``extent`` up to ``most``, and a smaller one."""
    divisors = [d for d in range(1, min(extent, most) + 1) if extent % d == 0]
    best = divisors[-1]
    smaller = [d for d in divisors if d <= best // 2 and d >= 2]
    return [best] + smaller[-1:]


def _square_tile(rows: int, cols: int, most: int) -> tuple[int, int] | None:
    """``(u_rows, u_cols)``, both at least 2, dividing the extents, with the most positions
    up to ``most`` (at least 4) and the squarest shape among those."""
    best = None
    for ur in range(2, min(rows, most) + 1):
        for uc in range(2, min(cols, most // ur) + 1):
            if rows % ur or cols % uc or ur * uc < 4:
                continue
            key = (ur * uc, -abs(ur - uc), uc)
            if best is None or key > best[0]:
                best = (key, (ur, uc))
    return best[1] if best else None


def _largest_divisor(extent: int, most: int) -> int:
    return max(d for d in range(1, max(1, min(extent, most)) + 1) if extent % d == 0)


def _config(spatial, reduce, vec, rows, v_tile, unrolled, r_block, window_inside,
            threads, blocked: bool = True) -> dict:
    """Split factors: S3 the register tile (``v_tile`` lanes of ``vec`` by the ``unrolled``
    row axes), S2 an L1 block of the output (unless not ``blocked``), S0 the rest (the
    parallel loop), S1 whatever keeps S0 from having fewer chunks than useful."""
    values = {}
    inner = {vec: v_tile, **unrolled}
    if rows and rows not in inner:
        inner[rows] = 1
    block = {}
    for name in (vec, rows):
        if name is None:
            continue
        extent = dict(spatial)[name]
        block[name] = _largest_divisor(extent // inner[name], max(1, 64 // inner[name])) \
            if blocked else 1
    while rows and block[vec] * inner[vec] * block[rows] * inner[rows] > ACCUMULATOR_TILE_MAX:
        block[rows] = _largest_divisor(block[rows], block[rows] - 1)
    outer = {n: e // (inner.get(n, 1) * block.get(n, 1)) for n, e in spatial}
    chunks = 1
    for e in outer.values():
        chunks *= e
    # too few parallel chunks (a late, small layer): move the row block out to S0
    if rows and chunks < 4 * threads and block[rows] > 1:
        moved = block[rows]
        outer[rows] *= moved
        block[rows] = 1
        chunks *= moved
    for name, extent in spatial:
        values[f"tile_{name}"] = (outer[name], 1, block.get(name, 1), inner.get(name, 1))
    innermost = reduce[-1][0] if reduce else None
    for name, extent in reduce:
        if name == innermost:
            r1 = _largest_divisor(extent, r_block)
            values[f"tile_{name}"] = (extent // r1, r1)
        else:  # the kernel window
            values[f"tile_{name}"] = (1, extent) if window_inside else (extent, 1)
    return values


def _choices(knobs, info, vec, unroll, inline) -> dict:
    values = {"vector_axis": vec, "outer": "S1/1", "unroll": unroll}
    if "producer_at" in knobs:
        values["producer_at"] = "inline" if inline else "root"
    for name, _, is_param in info.reads:
        if is_param and f"pack_{name}" in knobs:
            values[f"pack_{name}"] = "root" if name in info.layout_free else "none"
    return values
