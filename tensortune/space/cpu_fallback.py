"""The generic CPU rule for any function, and the per-block steps ``cpu_rowwise`` shares.

TVM's unscheduled default runs every block on one core, one scalar at a time (10-40x slower
than a schedule). The rule here needs nothing of a function but its blocks: each block's
leading spatial loops are fused into one parallel loop, its innermost loop is split by
``vector`` lanes and vectorized when spatial, and a reduction over its innermost loop is split
into ``vector`` partial sums (``rfactor``) whose loop is vectorized, so a row's sum, maximum or
sum of squares runs on vectors instead of one scalar dependency chain (a ViT-S layer norm,
197x384: 198 us a call on one core before, 22 us after). Steps TVM refuses on a block (an
opaque iterator, an irregular binding) are skipped for that block alone: what they leave is
still a valid schedule.
"""
from __future__ import annotations

VECTOR_MAX = 64  # lanes of one vectorized loop (LLVM splits it into registers)
PARALLEL_MIN = 2  # a parallel loop of fewer iterations only costs the fork
PARALLEL_CHUNKS = 128  # iterations of a fused parallel loop enough to keep the cores even
# below this many iterations a function runs on one core: waking TVM's thread pool cost 1.5-2
# us on this project's 2-core machines, more than a 16x48 layer norm (0.7 us) takes
PARALLEL_WORK = 1 << 14
BLOCK_PARALLEL_WORK = 1 << 12  # the same for one block of a function that runs in parallel
INLINE_GROWTH = 4  # inline a producer into consumers at most this many times its size
CHEAP_OPERATIONS = 8  # a producer of more arithmetic than this is inlined into one consumer only
ARITHMETIC = {"Add", "Sub", "Mul", "Div", "FloorDiv", "FloorMod", "Min", "Max", "Call", "Cast",
              "Select"}


def block_kinds(sch, block) -> str:
    """One letter per iterator of ``block``: S spatial, R reduction, O anything else."""
    return "".join({0: "S", 2: "R"}.get(int(iv.iter_type), "O") for iv in sch.get(block).iter_vars)


def leading_spatial(kinds: str) -> int:
    return len(kinds) - len(kinds.lstrip("S"))


def extent(sch, loop) -> int:
    return int(sch.get(loop).extent)


def attempt(step, *args):
    """``step(*args)`` (True for a step that returns nothing), or None where TVM refuses it (a
    refused primitive leaves the schedule as it was, so the rest of the schedule applies)."""
    try:
        result = step(*args)
    except Exception:  # TVM's ScheduleError / TVMError: this block keeps that loop as it is
        return None
    return True if result is None else result


def split_reduction(sch, block, vector: int, ragged: bool = False):
    """Split ``block``'s innermost loop, a reduction of a multiple of ``vector`` (or of 4 to
    ``vector`` elements, or with ``ragged`` of any length above ``vector``), into ``vector``
    partial results (TVM's ``rfactor``, the new axis last, so the partials are contiguous);
    returns the partial block, or None where this does not apply. Must run while the block is
    still at the root (``rfactor`` wants its block first under its loops)."""
    if not vector or block_kinds(sch, block)[-1:] != "R":
        return None
    loops = sch.get_loops(block)
    n = extent(sch, loops[-1])
    if n < vector and n >= 4:
        vector = n  # a row shorter than one vector: still one (narrower) vector of partials
    if n % vector and not (ragged and n > vector):
        # a ragged split (197 tokens) leaves a bounds test inside the vector loop: only a
        # block on its own has it peeled off (``peel_ragged``); ``compute_at`` would drop the
        # test (wrong sums, TVM 0.27)
        return None
    ndim = len(sch.get(block).writes[0].source.shape)
    _, inner = sch.split(loops[-1], [None, vector])
    partial = attempt(sch.rfactor, inner, ndim)
    if partial is None:  # not a commutative reduction TVM recognizes: merge the split back
        loops = sch.get_loops(block)
        sch.fuse(*loops[-2:])
    return partial


def vectorize_partial(sch, partial, parallel: bool = False, unroll: int = 0):
    """Move the lane loop of an ``rfactor`` block innermost and vectorize it; with
    ``parallel``, its leading loops parallel (before its init is split off: TVM refuses a
    parallel loop over two blocks). Returns that parallel loop, or None."""
    loops = sch.get_loops(partial)
    lane = bindings(sch, partial)[0]  # rfactor makes the lane iterator the block's first
    at = [i for i, lp in enumerate(loops) if lane.same_as(loop_var(sch, lp))]
    if not at:
        return
    if loops[at[0] + 1:] and attempt(sch.reorder, *loops[at[0] + 1:], loops[at[0]]) is None:
        return
    loops = sch.get_loops(partial)
    if 1 < extent(sch, loops[-1]) <= VECTOR_MAX:
        attempt(sch.vectorize, loops[-1])
    rows = parallel_leading(sch, partial, unroll) if parallel else None
    # the init apart, before the reduction loop (its copy of the lane loop stays vectorized):
    # a vector loop with the init's "first iteration?" test inside would not vectorize
    reduce_loops = [lp for lp in sch.get_loops(partial) if _is_reduction_loop(sch, partial, lp)]
    if reduce_loops:
        attempt(sch.decompose_reduction, partial, reduce_loops[0])
    return rows


def peel_ragged(sch, partial) -> None:
    """Run a ragged ``rfactor`` block's last chunk of the row (the 5 of 197 = 12 x 16 + 5)
    in a loop of its own: without it, the bounds test inside the vector loop makes TVM
    scalarize every chunk (a 1182 x 197 row maximum: 87 us scalar, 22 us peeled). The last
    step on the block: the partition replaces it."""
    realize = _realize(sch, partial)
    if _is_true(realize.predicate):
        return
    loops = [lp for lp in sch.get_loops(partial) if _is_reduction_loop(sch, partial, lp)]
    if loops and extent(sch, loops[0]) > 1:
        attempt(sch.loop_partition, loops[0], [extent(sch, loops[0]) - 1, None])


def _realize(sch, block):
    from tvm_ffi import get_global_func

    return get_global_func("s_tir.schedule.GetSBlockRealize")(sch, block)


def _is_true(expr) -> bool:
    return hasattr(expr, "value") and bool(expr.value)


def bindings(sch, block) -> list:
    """The loop expressions each iterator of ``block`` is bound to."""
    return list(_realize(sch, block).iter_values)


def loop_var(sch, loop):
    return sch.get(loop).loop_var


def _is_reduction_loop(sch, block, loop) -> bool:
    """Whether ``loop`` appears in the binding of a reduction iterator of ``block``."""
    from tvm.tirx.analysis import undefined_vars

    var = loop_var(sch, loop)
    for iv, value in zip(sch.get(block).iter_vars, bindings(sch, block)):
        if int(iv.iter_type) == 2 and any(v.same_as(var) for v in undefined_vars(value)):
            return True
    return False


def vectorize_inner(sch, block, vector: int, outer=None) -> None:
    """Split the block's innermost loop by ``vector`` and vectorize it (spatial) or give it an
    unroll pragma (a reduction left scalar); loops of one iteration and ``outer`` itself are
    left alone. A spatial loop no whole vector divides is partitioned first: whole vectors,
    then a scalar rest. The last step on a block (the rest is a block of its own)."""
    if not vector:
        return
    loops = sch.get_loops(block)
    if not loops:
        return
    inner = loops[-1]
    if outer is not None and sch.get(inner).same_as(sch.get(outer)):
        return
    n = extent(sch, inner)
    if n < 4:
        return  # a 3-channel pixel: LLVM's own unrolled scalar code was 2.6x faster
    reduce = _is_reduction_loop(sch, block, inner)
    if not reduce and not _binds_last_spatial(sch, block, inner):
        return  # not the block's own innermost axis: a strided "vector" gains nothing
    if n > vector and n % vector:
        if reduce or n < 2 * vector:
            return
        # a ragged row (197 tokens): whole vectors, then the rest in a loop of its own (a bounds
        # test inside the vector loop would make TVM scalarize all of it)
        parts = attempt(sch.loop_partition, inner, [n - n % vector, None])
        if parts is None:
            return
        inner = parts[0]
    if extent(sch, inner) > vector:
        _, inner = sch.split(inner, [None, vector])
    if reduce:
        sch.annotate(inner, "pragma_auto_unroll_max_step", vector)
    else:
        attempt(sch.vectorize, inner)


def _binds_last_spatial(sch, block, loop) -> bool:
    from tvm.tirx.analysis import undefined_vars

    var = loop_var(sch, loop)
    pairs = list(zip(sch.get(block).iter_vars, bindings(sch, block)))
    spatial = [value for iv, value in pairs if int(iv.iter_type) == 0]
    return bool(spatial) and any(v.same_as(var) for v in undefined_vars(spatial[-1]))


def parallel_leading(sch, block, unroll: int = 0):
    """Fuse the block's leading spatial loops (as many as it takes to give every core work,
    stopping at a reduction or the vector loop) into one parallel loop; returns it, or None."""
    if _iterations(sch.get(block)) < BLOCK_PARALLEL_WORK:
        return None
    loops = sch.get_loops(block)
    take, size = 0, 1
    for lp in loops[:-1]:  # fuse only what is needed: the inner loops stay for the vector
        if _is_vector_loop(sch, lp) or _is_reduction_loop(sch, block, lp):
            break
        take += 1
        size *= extent(sch, lp)
        if size >= PARALLEL_CHUNKS:
            break
    if size < PARALLEL_MIN:
        return None
    outer = attempt(sch.fuse, *loops[:take]) if take > 1 else loops[0]
    if outer is None or attempt(sch.parallel, outer) is None:
        return None
    if unroll:
        sch.annotate(outer, "pragma_auto_unroll_max_step", unroll)
        sch.annotate(outer, "pragma_unroll_explicit", 1)
    return outer


def reduction_style(sch, block) -> str:
    """How to vectorize a reduction block: ``spatial`` where an input is contiguous along its
    last spatial axis (a channels-last pooling or small convolution: vectors of outputs, the
    reduction loops moved outside them), ``rfactor`` where it is contiguous along the
    innermost reduction (a row's sum or maximum: vectors of partial results), else
    ``unroll``."""
    ivs = list(sch.get(block).iter_vars)
    spatial = [iv.var for iv in ivs if int(iv.iter_type) == 0 and int(iv.dom.extent) > 1]
    along_s = along_r = 0  # elements of the buffers read contiguously along each axis
    for read in sch.get(block).reads:
        if not len(read.region):
            continue
        size = 1
        for dim in read.source.shape:
            size *= int(dim) if hasattr(dim, "value") else 1
        if spatial and read.region[-1].min.same_as(spatial[-1]):
            along_s += size
        elif int(ivs[-1].iter_type) == 2 and read.region[-1].min.same_as(ivs[-1].var):
            along_r += size
    if not along_s and not along_r:
        return "unroll"
    # the larger stream decides: a softmax's row (not its broadcast maximum), a convolution's
    # weights (not the few input channels of one pixel)
    return "spatial" if along_s > along_r else "rfactor"


def vectorize_outputs(sch, block, vector: int):
    """Move the loop of the block's last spatial axis below its reduction loops, split it by
    ``vector`` and vectorize it; returns the first reduction loop (for ``decompose``) or
    None where this does not apply."""
    loops = sch.get_loops(block)
    values = bindings(sch, block)
    spatial = [v for iv, v in zip(sch.get(block).iter_vars, values)
               if int(iv.iter_type) == 0 and int(iv.dom.extent) > 1]
    at = [i for i, lp in enumerate(loops) if spatial and spatial[-1].same_as(loop_var(sch, lp))]
    if not at or not vector:
        return None
    lane = loops[at[0]]
    if loops[at[0] + 1:]:
        if attempt(sch.reorder, *loops[at[0] + 1:], lane) is None:
            return None
    n = extent(sch, lane)
    if n > vector:
        if n % vector:
            return None
        _, lane = sch.split(lane, [None, vector])
    attempt(sch.vectorize, lane)
    reduce_loops = [lp for lp in sch.get_loops(block) if _is_reduction_loop(sch, block, lp)]
    return reduce_loops[0] if reduce_loops else None


def decompose(sch, block, loop) -> None:
    """The reduction's init apart, before ``loop`` (after vectorizing and parallelizing: a
    block without its init no longer counts as a reduction for either)."""
    if loop is not None:
        attempt(sch.decompose_reduction, block, loop)


def _is_vector_loop(sch, loop) -> bool:
    return int(sch.get(loop).kind) == 2  # ForKind.VECTORIZED


def inline_elementwise(sch, block) -> None:
    """Inline an elementwise producer into its consumers, if TVM can (it refuses reductions,
    outputs and producers read with another index pattern) and none of them is many times
    larger: a squeeze-and-excitation scale or a norm's statistics would be recomputed per
    element (a padded input read twice by overlapping Winograd tiles is still inlined)."""
    if "R" in block_kinds(sch, block):
        return
    size = _size(sch.get(block))
    consumers = sch.get_consumers(block)
    if any(_size(sch.get(c)) > INLINE_GROWTH * size for c in consumers):
        return
    if len(consumers) > 1 and _operations(sch.get(block)) > CHEAP_OPERATIONS:
        return  # a softmax's exponential, read by its sum and its normalization: made once
    attempt(sch.compute_inline, block)


def _operations(block) -> int:
    """Arithmetic nodes in the value the block stores (a subtraction 1, TOPI's fast exp
    about a hundred, its subexpressions repeated)."""
    body = block.body
    return _count(body.value) if hasattr(body, "value") else 0


def _count(expr, budget: int = 1000) -> int:
    if type(expr).__name__ not in ARITHMETIC:
        return 0
    total = 1
    for child in _children(expr):
        total += _count(child, budget - total)
        if total >= budget:
            break
    return total


def _children(expr) -> list:
    kind = type(expr).__name__
    if kind == "Call":
        return list(expr.args)
    if kind == "Cast":
        return [expr.value]
    if kind == "Select":
        return [expr.condition, expr.true_value, expr.false_value]
    return [expr.a, expr.b]


def _size(block) -> int:
    size = 1
    for iv in block.iter_vars:
        if int(iv.iter_type) == 0:
            size *= int(iv.dom.extent)
    return size


def fallback_blocks(sch, blocks, vector: int, unroll: int, reduce: str = "rfactor",
                    parallel: bool = True) -> None:
    """Schedule each of ``blocks`` (children of the root) on its own: a reduction vectorized
    by its ``reduction_style`` (``rfactor`` only if ``reduce`` says so), any other innermost
    loop vectorized, the leading spatial loops fused and parallel (``parallel``)."""
    for block in blocks:
        style = reduction_style(sch, block) if "R" in block_kinds(sch, block) else ""
        first_reduce = None
        if style == "spatial":
            first_reduce = vectorize_outputs(sch, block, vector)
        elif style == "rfactor" and reduce == "rfactor":
            partial = split_reduction(sch, block, vector, ragged=True)
            if partial is not None:
                rows = vectorize_partial(sch, partial, parallel, unroll)
                peel_ragged(sch, partial)
                if rows is not None:  # each row's partials summed while still in cache
                    attempt(sch.reverse_compute_at, block, rows, True)
        if parallel:
            parallel_leading(sch, block, unroll)
        if style != "spatial":
            vectorize_inner(sch, block, vector)
        decompose(sch, block, first_reduce)


def work(sch) -> int:
    """Iterations of all blocks of the function together (reductions included)."""
    return sum(_iterations(sch.get(b)) for b in sch.get_child_blocks(sch.get_sblock("root")))


def _iterations(block) -> int:
    size = 1
    for iv in block.iter_vars:
        size *= int(iv.dom.extent)
    return size


def fallback_schedule(prim_func, lanes: int = 16, unroll: int = 16):
    """A ``tvm.s_tir.Schedule`` of ``prim_func`` by the generic rule (producers inlined where
    TVM can, then every block on its own), for a function no template fits."""
    from tvm.s_tir import Schedule

    sch = Schedule(prim_func)
    root = sch.get_sblock("root")
    for block in list(sch.get_child_blocks(root))[:-1]:
        inline_elementwise(sch, block)
    fallback_blocks(sch, list(sch.get_child_blocks(root)), lanes, unroll,
                    parallel=work(sch) >= PARALLEL_WORK)
    return sch
