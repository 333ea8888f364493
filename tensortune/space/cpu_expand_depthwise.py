"""The CPU template for a fused expand-then-depthwise function (``tasks.expand_depthwise``).

Loop structure, parallel over blocks of output rows and channels:

    (row block, channel block)  parallel
        expanded rows the block needs (its halo included): 1x1 convolution tiled as
            rows . column tile . input channels . columns (unrolled) . channels (vectors)
            with bias and activation written back per column tile
        output rows . column tile . 3x3 window . columns (unrolled) . channels (vectors)
            with the depthwise bias and activation written back per column tile

The expanded rows live in a buffer of ``rows x width x channel block`` that stays in cache;
the knobs are the row block, the channel block, both column tiles, whether the zero padding is
read through a condition or copied into a padded buffer first, and an unroll pragma.
"""
from __future__ import annotations

from .analysis import TemplateMismatch
from .loops import vectorize_vectors
from .space import InvalidConfigError

POINTWISE, POINTWISE_ACT, PAD, DEPTHWISE = ("tt_pointwise", "tt_pointwise_act", "tt_pad",
                                            "tt_depthwise")
LANES = 16  # AVX-512 floats: bounds the register tile (accumulators) a config may ask for
UNROLL_STEPS = (0, 16, 64)


def is_expand_depthwise(sch) -> bool:
    """Whether ``sch``'s function is ``tasks.expand_depthwise``'s (found by its block names)."""
    names = {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}
    return {POINTWISE, POINTWISE_ACT, PAD, DEPTHWISE} <= names


def shape_of(sch) -> dict:
    """Extents of the depthwise output (``rows``, ``cols``, ``channels``) and of the expanded
    tensor's width (``width``)."""
    dw = sch.get(sch.get_sblock(DEPTHWISE))
    pw = sch.get(sch.get_sblock(POINTWISE))
    ext = [int(iv.dom.extent) for iv in dw.iter_vars]
    return {"rows": ext[1], "cols": ext[2], "channels": ext[3],
            "width": int(pw.iter_vars[2].dom.extent), "inputs": int(pw.iter_vars[4].dom.extent)}


def divisors(n: int, most: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, min(n, most) + 1) if n % d == 0)


def channel_blocks(channels: int) -> tuple[int, ...]:
    """Channel blocks: divisors of the channel count that are whole vectors of 4 lanes or
    more, up to 96, or the channel count itself when none is."""
    blocks = tuple(d for d in range(4, min(channels, 96) + 1) if channels % d == 0 and d % 4 == 0)
    return blocks or (channels,)


def expand_depthwise_cpu(cfg, sch):
    """Define or apply the space (module docstring) on ``sch``."""
    if not is_expand_depthwise(sch):
        raise TemplateMismatch("not an expand-then-depthwise function")
    shape = shape_of(sch)
    rows = cfg.choice("rows", divisors(shape["rows"], 16)[::-1])
    block = cfg.choice("channels", channel_blocks(shape["channels"]))
    dw_cols = cfg.choice("dw_cols", divisors(shape["cols"], 8)[::-1])
    pw_cols = cfg.choice("pw_cols", divisors(shape["width"], 16)[::-1])
    padded = cfg.choice("pad", ("condition", "buffer"))
    unroll = cfg.choice("unroll", UNROLL_STEPS)
    if pw_cols * -(-block // LANES) > 32 or dw_cols * -(-block // LANES) > 32:
        raise InvalidConfigError("register tile exceeds 32 vector accumulators")

    dw, pw = sch.get_sblock(DEPTHWISE), sch.get_sblock(POINTWISE)
    act, pad = sch.get_sblock(POINTWISE_ACT), sch.get_sblock(PAD)
    write_back = _fold_consumers(sch, dw)
    if padded == "condition":
        sch.compute_inline(pad)
    b, y, x, c, ry, rx = sch.get_loops(dw)
    yo, yi = sch.split(y, [None, rows])
    co, ci = sch.split(c, [None, block])
    xo, xi = sch.split(x, [None, dw_cols])
    sch.reorder(b, yo, co, yi, xo, ry, rx, xi, ci)
    sch.reverse_compute_at(write_back, xo, preserve_unit_loops=True)
    if padded == "buffer":
        sch.compute_inline(act)
        sch.compute_at(pad, co, preserve_unit_loops=True)
    else:
        sch.compute_at(act, co, preserve_unit_loops=True)
    sch.compute_at(pw, co, preserve_unit_loops=True)

    *_, py, px, pc, pk = sch.get_loops(pw)
    pxo, pxi = sch.split(px, [None, pw_cols])
    sch.reorder(py, pxo, pk, pxi, pc)
    if padded == "condition":
        sch.reverse_compute_at(act, pxo, preserve_unit_loops=True)
        vectorize_vectors(sch, sch.get_loops(act)[-1])
    else:
        vectorize_vectors(sch, sch.get_loops(pad)[-1])
    sch.unroll(pxi)
    vectorize_vectors(sch, pc)
    outer = sch.fuse(b, yo, co)
    sch.parallel(outer)
    if unroll:
        sch.annotate(outer, "pragma_auto_unroll_max_step", unroll)
        sch.annotate(outer, "pragma_unroll_explicit", 1)
    sch.decompose_reduction(pw, pk)
    sch.unroll(xi)
    vectorize_vectors(sch, ci)
    sch.decompose_reduction(dw, ry)
    vectorize_vectors(sch, sch.get_loops(write_back)[-1])
    return sch


def _fold_consumers(sch, block):
    """The depthwise result's write-back block: its elementwise consumer chain folded into the
    first consumer, or a new copy block when it has none."""
    consumers = list(sch.get_consumers(block))
    while len(consumers) == 1 and len(sch.get_consumers(consumers[0])) == 1:
        sch.reverse_compute_inline(sch.get_consumers(consumers[0])[0])
    if not consumers:
        return sch.cache_write(block, 0, "global")
    if len(consumers) > 1:
        raise TemplateMismatch(f"the depthwise result has {len(consumers)} consumers")
    return consumers[0]


def expand_depthwise_seeds(space, sch, lanes: int = 16) -> list:
    """A few configs in the space: 4-8 output rows, channel blocks of one to three vectors,
    the widest column tiles that fit, padding by condition."""
    from .config import Config

    knobs = {k.name: k.options for k in space.knobs}
    rows = [r for r in knobs["rows"] if r <= 8][:2] or list(knobs["rows"][-1:])
    blocks = [b for b in knobs["channels"] if b in (lanes, 2 * lanes, 3 * lanes)] \
        or list(knobs["channels"][-1:])
    out = []
    for r in rows:
        for blk in blocks:
            vecs = -(-blk // lanes)
            dw_cols = next(d for d in knobs["dw_cols"] if d * vecs <= 16)
            pw_cols = next((d for d in knobs["pw_cols"] if d * vecs <= 16 and d <= 14),
                           knobs["pw_cols"][-1])
            config = Config({"rows": r, "channels": blk, "dw_cols": dw_cols, "pw_cols": pw_cols,
                             "pad": "condition", "unroll": 0})
            if config in space:
                out.append(config)
    return out
