"""The CUDA rule for any function ``cuda_generic``'s tiling does not fit, with knobs to tune.

What dlight's ``Fallback`` and ``GeneralReduction`` rules do, as a space that tensortune's
loop measures and records like any other: elementwise producers are inlined into their
consumers, then every block left is a kernel of its own. A spatial block's loops are fused
and spread over ``threads`` threads per block, each thread taking ``elems`` outputs spaced a
block apart (so a warp's accesses stay contiguous). A reduction block (Winograd's input
transform, pooling, a softmax's or a norm's row statistics) is reduced per output either by
one thread in registers (``reduce=thread``, its elementwise consumer written back by the same
thread) or by the threads of a warp or a whole block together (``warp``, ``block``: TVM's
cross-thread reduction, offered where a row holds at least a warp of elements). ``unroll``
is the kernels' unroll pragma.
"""
from __future__ import annotations

import math

from .cpu_fallback import attempt, bindings, block_kinds, extent, loop_var
from .space import InvalidConfigError

THREADS = (32, 64, 128, 256, 512, 1024)
ELEMS = (1, 2, 4)
UNROLL = (0, 16, 64, 256)
WARP = 32


def cuda_fallback(cfg, sch):
    """Define (with a ``SpaceBuilder``) or apply (with a ``ConfigSource``) the rule's space."""
    from .cuda_template import verify_limits  # here: cuda_template imports this module

    root = sch.get_sblock("root")
    blocks = list(sch.get_child_blocks(root))
    if not blocks:
        raise InvalidConfigError("the function has no block to schedule")
    longest = max((_reduce_extent(sch, b) for b in blocks), default=0)

    # -- knobs (fixed order; which exist depends on the function, not on other knobs) -----------
    threads = cfg.choice("threads", THREADS)
    elems = cfg.choice("elems", ELEMS)
    reduce = None
    if longest:
        reduce = cfg.choice("reduce", ("thread", "warp", "block") if longest >= WARP
                            else ("thread",))
    unroll = cfg.choice("unroll", UNROLL)

    for block in blocks[:-1]:  # the last block writes the output: it cannot be inlined
        if "R" not in block_kinds(sch, block):
            attempt(sch.compute_inline, block)
    placed: set[str] = set()  # consumers already scheduled inside their reduction's kernel
    for block in list(sch.get_child_blocks(root)):
        if not _alive(sch, block) or sch.get(block).name_hint in placed:
            continue
        if "R" in block_kinds(sch, block):
            placed |= _reduction(sch, block, reduce, threads, elems, unroll)
        else:
            _spatial(sch, block, threads, elems, unroll)
    verify_limits(sch)
    return sch


def _reduce_extent(sch, block) -> int:
    """Elements a block reduces per output (0 for a block that reduces nothing)."""
    sizes = [int(iv.dom.extent) for iv in sch.get(block).iter_vars if int(iv.iter_type) == 2]
    return math.prod(sizes) if sizes else 0


def _alive(sch, block) -> bool:
    try:
        sch.get(block)
    except Exception:  # removed by an inline: TVM invalidates the handle
        return False
    return True


def _split_loops(sch, block):
    """The block's loops as (spatial, other): a loop is spatial when only spatial iterators use
    it; the spatial ones are moved outside the rest (a no-op for TVM's usual loop order)."""
    from tvm.tirx.analysis import undefined_vars

    pairs = list(zip(sch.get(block).iter_vars, bindings(sch, block)))
    loops = sch.get_loops(block)
    spatial, other = [], []
    for lp in loops:
        var = loop_var(sch, lp)
        uses = [int(iv.iter_type) for iv, value in pairs
                if any(v.same_as(var) for v in undefined_vars(value))]
        (spatial if uses and all(u == 0 for u in uses) else other).append(lp)
    if spatial and other and attempt(sch.reorder, *spatial, *other) is None:
        # TVM refused the order: only the spatial loops already outermost are spread
        lead = []
        for lp in loops:
            if not any(sch.get(lp).same_as(sch.get(s)) for s in spatial):
                break
            lead.append(lp)
        spatial, other = lead, [lp for lp in loops if lp not in lead]
    return spatial, other


def _spread(sch, loops, threads: int, elems: int, unroll: int):
    """Fuse ``loops`` and bind them to blocks x threads, ``elems`` per thread a block apart;
    returns the innermost loop (one output)."""
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    n = extent(sch, fused)
    t = min(threads, n)
    e = max(1, min(elems, -(-n // t)))
    bx, e_loop, tx = sch.split(fused, [None, e, t])
    sch.reorder(bx, tx, e_loop)
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    if unroll:
        sch.annotate(bx, "pragma_auto_unroll_max_step", unroll)
        sch.annotate(bx, "pragma_unroll_explicit", 1)
    return bx, e_loop


def _spatial(sch, block, threads: int, elems: int, unroll: int) -> None:
    spatial, _ = _split_loops(sch, block)
    if not spatial:
        spatial = [sch.add_unit_loop(block)]
    _spread(sch, spatial, threads, elems, unroll)


def _reduction(sch, block, mode: str, threads: int, elems: int, unroll: int) -> set[str]:
    """Schedule reduction ``block``; the names of the consumers it scheduled with it."""
    consumers = list(sch.get_consumers(block))
    if mode == "thread" or _reduce_extent(sch, block) < WARP:
        # one thread per output, the sum in a register; its elementwise consumer (a pooling's
        # division, a bias) joins the write-back where TVM can inline it there
        local = sch.cache_write(block, 0, "local")
        if len(consumers) == 1:
            attempt(sch.reverse_compute_inline, consumers[0])
        spatial, other = _split_loops(sch, block)
        if not spatial:
            spatial = [sch.add_unit_loop(block)]
        _, at = _spread(sch, spatial, threads, elems, unroll)
        sch.reverse_compute_at(local, at, preserve_unit_loops=True)
        if other:
            attempt(sch.decompose_reduction, block, other[0])
        return set()
    spatial, other = _split_loops(sch, block)
    r = sch.fuse(*other) if len(other) > 1 else other[0]
    width = WARP if mode == "warp" else min(threads, extent(sch, r))
    rows = threads // WARP if mode == "warp" else 1
    if not spatial:
        spatial = [sch.add_unit_loop(block)]
    fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    rows = min(rows, extent(sch, fused))
    bx, ty = sch.split(fused, [None, rows])
    r_out, tx = sch.split(r, [None, width])
    sch.reorder(bx, ty, tx, r_out)  # thread t sums elements t, t + width, ...: coalesced
    sch.bind(bx, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    if unroll:
        sch.annotate(r_out, "pragma_auto_unroll_max_step", unroll)
        sch.annotate(r_out, "pragma_unroll_explicit", 1)
    epilogue = consumers[0] if len(consumers) == 1 else None
    if epilogue is None or _is_output(sch, block) or "R" in block_kinds(sch, epilogue):
        return set()  # a reduction after it (a sum of all rows) needs every block's rows
    # the elementwise epilogue in the same kernel, reading the row's result from shared
    # memory: one launch and no round trip through global memory
    if attempt(sch.reverse_compute_at, epilogue, ty, True) is None:
        return set()
    sch.set_scope(block, 0, "shared")
    return {sch.get(epilogue).name_hint}


def _is_output(sch, block) -> bool:
    outputs = {p.name for p in sch.mod["main"].params}  # TVM 0.27: the params are buffers
    return any(w.source.name in outputs for w in sch.get(block).writes)
