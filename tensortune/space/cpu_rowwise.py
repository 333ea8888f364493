"""The CPU template for functions that are not one tiled reduction: elementwise and layout
copies (no reduction), and row-wise reductions such as softmax and layer norm (several
reduction blocks over the same leading axes).

The schedule, after TVM's dlight CPU reduction rule: elementwise producers are inlined (knob
``inline``), the output block's leading spatial loops are fused into one parallel loop (knob
``rows``: how many), every other block is computed under that loop, so a row's statistics and
its normalization stay in cache, and the innermost loop of each block is split by ``vector``
lanes and vectorized (reductions are split the same way and unrolled), with an unroll pragma
(knob ``unroll``).
"""
from __future__ import annotations

from .analysis import TemplateMismatch
from .space import InvalidConfigError

VECTORS = (8, 16, 32, 0)  # inner split factor (0: leave the innermost loop scalar)
UNROLL_STEPS = (16, 0, 64)


def block_kinds(sch, block) -> str:
    """One letter per iterator of ``block``: S spatial, R reduction, O anything else."""
    return "".join({0: "S", 2: "R"}.get(int(iv.iter_type), "O") for iv in sch.get(block).iter_vars)


def leading_spatial(kinds: str) -> int:
    return len(kinds) - len(kinds.lstrip("S"))


def rowwise_cpu(cfg, sch):
    """Define or apply the row-wise space on ``sch`` (see the module docstring)."""
    root = sch.get_sblock("root")
    blocks = list(sch.get_child_blocks(root))
    if not blocks:
        raise TemplateMismatch("the function has no blocks")
    kinds = [block_kinds(sch, b) for b in blocks]
    if any("O" in k for k in kinds):
        raise TemplateMismatch("a block has an iterator that is neither spatial nor reduction")
    out_kind = kinds[-1]
    lead = min([leading_spatial(k) for k in kinds])
    lead = min(lead, len(out_kind))
    if lead < 1:
        raise TemplateMismatch("the output block has no leading spatial axis to parallelize")
    inline = cfg.choice("inline", (True, False)) if len(blocks) > 1 else False
    rows = cfg.choice("rows", tuple(range(lead, 0, -1)))
    vector = cfg.choice("vector", VECTORS)
    unroll = cfg.choice("unroll", UNROLL_STEPS)

    if inline:
        for block in blocks[:-1]:
            _try_inline(sch, block)
    blocks = list(sch.get_child_blocks(root))
    last = blocks[-1]
    loops = sch.get_loops(last)
    if rows > len(loops):
        raise InvalidConfigError(f"rows {rows} exceeds the output's {len(loops)} loops")
    outer = sch.fuse(*loops[:rows]) if rows > 1 else loops[0]
    sch.parallel(outer)
    if unroll:
        sch.annotate(outer, "pragma_auto_unroll_max_step", unroll)
        sch.annotate(outer, "pragma_unroll_explicit", 1)
    for block in reversed(blocks[:-1]):
        sch.compute_at(block, outer, preserve_unit_loops=True)
    for block in blocks:
        _vectorize_inner(sch, block, vector, outer)
    return sch


def _try_inline(sch, block) -> None:
    """Inline an elementwise producer into its consumers, if TVM can (it refuses reductions,
    outputs and producers read with a different index pattern)."""
    if "R" in block_kinds(sch, block):
        return
    try:
        sch.compute_inline(block)
    except Exception:  # TVM's ScheduleError: this block stays a block of its own
        pass


def _vectorize_inner(sch, block, vector: int, outer) -> None:
    """Split the block's innermost loop by ``vector`` and vectorize it (spatial) or unroll it
    (reduction); loops of one iteration and the parallel loop itself are left alone."""
    if not vector:
        return
    loops = sch.get_loops(block)
    if not loops:
        return
    inner = loops[-1]
    if sch.get(inner).same_as(sch.get(outer)):
        return
    extent = int(sch.get(inner).extent)
    if extent < 2:
        return
    # reduction blocks keep their reduction iterators innermost (TOPI's softmax, layer norm)
    reduce = block_kinds(sch, block)[-1] == "R"
    if extent > vector:
        if extent % vector:
            return  # a tail would leave a predicate in the vector loop: keep it scalar
        _, inner = sch.split(inner, [None, vector])
    if reduce:
        sch.annotate(inner, "pragma_auto_unroll_max_step", vector)
    else:
        sch.vectorize(inner)
