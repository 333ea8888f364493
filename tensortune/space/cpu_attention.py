"""The CPU template for fused attention (``tasks.attention``).

Loop structure, parallel over heads (or over heads x row blocks):

    head                                      parallel (knob ``parallel``: heads)
        Kᵀ of the head, packed into a panel of whole vectors of columns
        row block of ``rows`` rows                (parallel with the heads: ``blocks``)
            scores: column tile . d . rows (unrolled) . columns (vector)
            row max and row sum: ``rfactor`` into one vector of partials per row
            exp(score - max), vectorized
            out: column tile . key . rows (unrolled) . columns (vector)
            out / sum, vectorized

A row block's scores and probabilities stay in L1. The knobs are the row block, the two
register tiles' column widths, where the parallel loop is and an unroll pragma.
"""
from __future__ import annotations

from .analysis import TemplateMismatch
from .cpu_fallback import split_reduction, vectorize_partial
from .loops import extent, vectorize_vectors
from .space import InvalidConfigError

KT, SCORES, MAX, EXP, SUM, OUT, NORM = ("tt_attn_kt", "tt_attn_scores", "tt_attn_max",
                                        "tt_attn_exp", "tt_attn_sum", "tt_attn_out",
                                        "tt_attn_norm")
NAMED = (KT, SCORES, MAX, EXP, SUM, OUT, NORM)
LANES = 16  # AVX-512 floats: bounds the register tiles a config may ask for
ACCUMULATORS = 24  # vector registers a register tile may hold (of 32)
ROWS_MAX = 16
UNROLL_STEPS = (0, 16, 64)
PARTIALS = 16  # partial results of the row max and sum (one AVX-512 vector)


def is_attention(sch) -> bool:
    """Whether ``sch``'s function is ``tasks.attention``'s (found by its block names)."""
    names = {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}
    return set(NAMED) <= names


def shape_of(sch) -> dict:
    """Padded rows and columns of the scores, the head size and the output's width."""
    scores = sch.get(sch.get_sblock(SCORES))
    out = sch.get(sch.get_sblock(OUT))
    ext = [int(iv.dom.extent) for iv in scores.iter_vars]
    return {"rows": ext[-3], "cols": ext[-2], "depth": ext[-1],
            "width": int(out.iter_vars[-2].dom.extent), "batch": len(ext) - 3}


def _tiles(n: int) -> tuple[int, ...]:
    """Vector widths (whole AVX-512 vectors, at most four) that divide ``n``."""
    return tuple(w for w in (16, 32, 48, 64) if n % w == 0) or (n,)


def attention_cpu(cfg, sch):
    """Define or apply the space (module docstring) on ``sch``."""
    if not is_attention(sch):
        raise TemplateMismatch("not a fused attention function")
    shape = shape_of(sch)
    # eight rows first (the defaults must make a valid config): four vectors of columns fit
    rows = cfg.choice("rows", tuple(sorted((r for r in range(1, ROWS_MAX + 1)
                                            if shape["rows"] % r == 0), key=lambda r: abs(r - 8))))
    score_cols = cfg.choice("score_cols", _tiles(shape["cols"]))
    out_cols = cfg.choice("out_cols", _tiles(shape["width"]))
    parallel = cfg.choice("parallel", ("heads", "blocks"))
    unroll = cfg.choice("unroll", UNROLL_STEPS)
    for cols in (score_cols, out_cols):
        if rows * -(-cols // LANES) > ACCUMULATORS:
            raise InvalidConfigError(f"register tile of {rows} x {cols} exceeds "
                                     f"{ACCUMULATORS} vector accumulators")

    root = sch.get_sblock("root")
    for block in list(sch.get_child_blocks(root)):  # the views of Q, K, V and the exp's steps
        if sch.get(block).name_hint not in NAMED:
            sch.compute_inline(block)
    # row max and sum as a vector of partials per row, split while the blocks are at the root
    partials = [split_reduction(sch, sch.get_sblock(name), PARTIALS) for name in (MAX, SUM)]

    # the normalization (the output, rows unpadded) carries the loop nest; every other block
    # is computed per row block under it, over the block's padded rows
    norm = sch.get_sblock(NORM)
    *batch, i, _ = _computed_order(sch, norm)
    head = sch.fuse(*batch) if len(batch) > 1 else batch[0]
    io, _ = sch.split(i, [None, rows])
    if parallel == "blocks":
        block_loop = head_loop = sch.fuse(head, io)
    else:
        head_loop, block_loop = head, io
    sch.parallel(head_loop)
    for block in [sch.get_sblock(OUT), sch.get_sblock(SUM), partials[1], sch.get_sblock(EXP),
                  sch.get_sblock(MAX), partials[0], sch.get_sblock(SCORES)]:
        if block is not None:  # a reduction TVM would not split has no partials
            sch.compute_at(block, block_loop, preserve_unit_loops=True)
    sch.compute_at(sch.get_sblock(KT), head_loop, preserve_unit_loops=True)

    out = sch.get_sblock(OUT)
    *_, ii, e, rv = sch.get_loops(out)
    eo, ei = sch.split(e, [None, out_cols])
    sch.reorder(eo, rv, ii, ei)
    scores = sch.get_sblock(SCORES)
    *_, si, sj, sd = sch.get_loops(scores)
    sjo, sji = sch.split(sj, [None, score_cols])
    sch.reorder(sjo, sd, si, sji)
    sch.unroll(si)
    vectorize_vectors(sch, sji)
    sch.decompose_reduction(scores, sd)

    for partial in partials:
        if partial is not None:
            vectorize_partial(sch, partial)
    exp = sch.get_sblock(EXP)
    vectorize_vectors(sch, sch.split(sch.get_loops(exp)[-1], [None, LANES])[1])
    kt = sch.get_sblock(KT)
    vectorize_vectors(sch, sch.split(sch.get_loops(kt)[-1], [None, LANES])[1])

    sch.unroll(ii)
    vectorize_vectors(sch, ei)
    sch.decompose_reduction(out, rv)
    last = sch.get_loops(norm)[-1]
    if extent(sch, last) % LANES == 0:
        vectorize_vectors(sch, sch.split(last, [None, LANES])[1])
    if unroll:
        sch.annotate(head_loop, "pragma_auto_unroll_max_step", unroll)
        sch.annotate(head_loop, "pragma_unroll_explicit", 1)
    return sch


def _computed_order(sch, norm) -> list:
    """The normalization's loops in the order of the computed result's axes (heads, rows,
    features), whatever permutation it writes (``tasks.attention``'s ``out_axes``)."""
    block = sch.get(norm)
    loops = sch.get_loops(norm)
    ivars = [iv.var for iv in block.iter_vars]
    read = next(r for r in block.reads if r.source.name == OUT)
    order = [next(k for k, v in enumerate(ivars) if v.same_as(rng.min)) for rng in read.region]
    if order != sorted(order):
        sch.reorder(*[loops[k] for k in order])
    return [loops[k] for k in order]


def attention_seeds(space, sch, lanes: int = 16) -> list:
    """A few configs in the space: 4-8 rows, the widest column tiles the registers hold,
    parallel over heads, then over row blocks."""
    from .config import Config

    knobs = {k.name: k.options for k in space.knobs}
    out = []
    for parallel in ("heads", "blocks"):
        for rows in [r for r in knobs["rows"] if 4 <= r <= 8] or list(knobs["rows"][-1:]):
            for score_cols in knobs["score_cols"]:
                for out_cols in knobs["out_cols"]:
                    config = Config({"rows": rows, "score_cols": score_cols,
                                     "out_cols": out_cols, "parallel": parallel, "unroll": 0})
                    vecs = max(-(-score_cols // lanes), -(-out_cols // lanes))
                    if config in space and rows * vecs <= ACCUMULATORS:
                        out.append(config)
    return out
