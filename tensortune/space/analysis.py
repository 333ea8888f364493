"""What a template sees of a TIR function: its one reduction block and how inputs are indexed."""
from __future__ import annotations

from dataclasses import dataclass

from .space import InvalidConfigError


class TemplateMismatch(InvalidConfigError):
    """The function has no block that this template can schedule."""


# a ragged axis (ViT's 197 tokens: prime) is padded to a multiple of 8 rows or 16 columns
# (a whole AVX-512 vector, two AVX2 ones) when no register tile divides it: (multiple, the
# largest tile looked for, the least that still pays) for the output's innermost axis, then
# the one before it
RAGGED = ((16, 32, 8), (8, 16, 4))
PAD_WASTE = 16  # an output axis at most 1 / PAD_WASTE short of a vector multiple is padded
# else to a multiple of 8 (one AVX2 vector) at most 1 / 8 short: ShuffleNet's 58 and 116
# channels ran 2- and 4-lane tiles at 19-23% of Zen 3's peak; as 64 and 120, 1.6-2.9x faster
HALF_VECTOR, HALF_WASTE = 8, 8
AXIS_NAMES = "tensortune.axis_names"  # a block's iterators' names from before it was reshaped
VECTOR_AXIS = "tensortune.vector_axis"  # a block's own choice of vector axis (its short name)
PAD_COPY_MAX = 1 << 18  # elements: a 128 x 255 weight is copied padded, a 768 x 50257 one not
# AVX2's 16 registers keep 12 accumulators: 6 positions x 2 vectors. A 1x1 convolution whose
# image rows are shorter than ``SHORT_ROW`` has no such tile (7 x 1 vectors ran at 40% of Zen
# 3's peak): its positions are fused into one axis, padded to a multiple of ``POSITION_TILE``;
# where its channels are no multiple of two vectors but of ``WIDE_TILE`` (RegNet's 440: 55
# vectors), they stay unpadded and the positions go two at a time (2 x 5 vectors)
POSITION_TILE = 6
SHORT_ROW = 8
WIDE_TILE = 5
WIDE_POSITIONS = 2  # x WIDE_TILE vectors: 10 accumulators of the 12


def vector_registers(lanes: int) -> int:
    """Architectural vector registers: 32 zmm with AVX-512, 16 ymm with AVX2."""
    return 32 if lanes >= 16 else 16


@dataclass(frozen=True)
class MainBlockInfo:
    name: str
    spatial: tuple[tuple[str, int], ...]
    reduce: tuple[tuple[str, int], ...]
    # for each input buffer of the main block: per dimension, the iter-var names it uses
    reads: tuple[tuple[str, tuple[frozenset, ...], bool], ...]
    # parameters marked ``layout_free_buffers`` (constant weights of a model): a copy of one
    # into another layout can be made once, at compile time
    layout_free: frozenset = frozenset()
    # the spatial axis a block asks to be vectorized (``VECTOR_AXIS``), or None: the seeds'
    # default, the output's innermost axis
    vector_axis: str | None = None


def is_tiled(sch) -> bool:
    """Whether ``cpu_template``'s tiling applies: exactly one reduction block, writing one
    buffer, whose consumers form a single chain (a convolution, a matmul, pooling), or do once
    the elementwise blocks between are inlined (``inline_epilogue``: SiLU's ``x * sigmoid(x)``,
    GELU), and none of them is larger than the reduction (a broadcast after it, such as
    squeeze-and-excitation's scale or an RMS norm, is row-wise work). The rest (elementwise
    copies, softmax, layer norm) is ``cpu_rowwise``'s."""
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    reductions = [b for b in blocks if any(int(iv.iter_type) == 2 for iv in sch.get(b).iter_vars)]
    if len(reductions) != 1 or len(sch.get(reductions[0]).writes) != 1:
        return False
    main = reductions[0]
    size = _spatial_size(sch.get(main))
    if any(_spatial_size(sch.get(b)) > size for b in _downstream(sch, main)):
        return False
    if _is_chain(sch, main):
        return True
    trial = sch.copy()
    inline_epilogue(trial, trial.get_sblock(sch.get(main).name_hint))
    return _is_chain(trial, trial.get_sblock(sch.get(main).name_hint))


def inline_epilogue(sch, main) -> None:
    """Inline the elementwise blocks after ``main`` that feed more than one later block, until
    its consumers form a chain (or TVM refuses one)."""
    while not _is_chain(sch, main):
        inner = [b for b in _downstream(sch, main) if list(sch.get_consumers(b))]
        for block in inner:
            try:
                sch.compute_inline(block)
                break
            except Exception:  # TVM's ScheduleError: not elementwise, try the next
                continue
        else:
            return


def inline_side_producers(sch, main) -> None:
    """Inline the elementwise blocks that feed the epilogue after ``main`` without reading
    it: ``conv(x) + b1 + (y + b2)`` (an FPN's lateral sum, the bias of the transposed
    convolution it adds fused here) made the write-back's reverse inlining fail, and the
    function fell to the generic rule at 9% of the peak."""
    downstream = _downstream(sch, main)
    names = {sch.get(b).name_hint for b in downstream} | {sch.get(main).name_hint}
    for block in downstream:
        for producer in list(sch.get_producers(block)):
            if sch.get(producer).name_hint in names:
                continue
            try:
                sch.compute_inline(producer)
            except Exception:  # TVM's ScheduleError: not elementwise; the template decides
                continue


def pad_ragged(sch, lanes: int | None = None) -> list:
    """Pad the main block's two innermost spatial axes where ``RAGGED`` says so, with TVM's
    ``pad_einsum`` (the output computed into a padded buffer, then copied out; inputs copied
    into zero-padded buffers); returns those input copies' blocks. A matmul of 197 rows got
    one-row register tiles at 2-3 GFLOP/s; 200 rows take ten. Nothing is padded where no
    axis is ragged or TVM refuses (a convolution's windowed reads), so other functions keep
    their spaces and records. For ``lanes``-wide vectors of AVX2, a 1x1 convolution's short
    rows are fused (``fuse_positions``) and padded to a multiple of ``POSITION_TILE``, unless
    its channels would be padded: then they are no multiple of two vectors, and where they are
    of ``WIDE_TILE`` vectors they stay unpadded, the positions padded to even."""
    info = analyze(sch)
    factors = _ragged_factors(sch, info)
    last = len(info.spatial) - 1  # the channels, before any fusion
    # padded channels and positions both (RegNet-Y's 440 as 448 over 54 positions) did 12% more
    # work and ran 1.5x slower than 1 x 7-vector tiles over rows (311 against 201 us on Zen 3)
    if factors[last] == 1:
        step = POSITION_TILE
    elif lanes and info.spatial[last][1] % (WIDE_TILE * lanes) == 0:
        step = WIDE_POSITIONS
    else:
        step = None
    if step and fuse_positions(sch, info, lanes):
        info = analyze(sch)  # (n, positions, channels) now
        factors = _ragged_factors(sch, info)
        if step == WIDE_POSITIONS:
            factors[len(info.spatial) - 1] = 1  # the channels stay unpadded
        if info.spatial[1][1] % step:
            factors[1] = step
    if all(f == 1 for f in factors):
        return []
    main = sch.get_sblock(info.name)
    before = {sch.get(b).name_hint for b in sch.get_producers(main)}
    try:
        sch.pad_einsum(main, factors)
    except Exception:  # TVM's ScheduleError: not an einsum
        # a 1x1 convolution reads ``x[yy + ry, xx + rx]`` over a window of one: without its
        # unit axes it is an einsum (tried on a copy first, so a refusal changes nothing)
        units = [len(info.spatial) + j for j, (_, e) in enumerate(info.reduce) if e == 1]
        trial = sch.copy()
        if not units or not _drop_axes(trial, info.name, len(factors), units, factors):
            return []
        _drop_axes(sch, info.name, len(factors), units, factors)
    main = sch.get_sblock(info.name)
    return [b for b in sch.get_producers(main) if sch.get(b).name_hint not in before]


def _ragged_factors(sch, info: MainBlockInfo) -> list[int]:
    """``pad_einsum``'s factors for the main block's axes, by ``RAGGED``'s rules."""
    spatial = [e for _, e in info.spatial]
    movable = [i for i, e in enumerate(spatial) if e > 1]
    factors = [1] * (len(spatial) + len(info.reduce))
    for j, (i, (multiple, most, least)) in enumerate(zip(movable[::-1], RAGGED)):
        if spatial[i] > most and max(d for d in range(1, most + 1) if spatial[i] % d == 0) < least:
            factors[i] = multiple
        elif j == 0 and spatial[i] > most and _read_along(sch, info, i) <= PAD_COPY_MAX:
            # nearly a multiple of the vector (YOLO's 255 outputs: 17-lane tiles ran at 15%
            # of the peak; RegNet's 440 as 448, as ONNX Runtime pads it), where padding costs
            # at most 1 / PAD_WASTE more work (else to whole AVX2 vectors, 1 / HALF_WASTE)
            # and the padded copies of the inputs are small
            # (a constant weight's copy is made once, at build time: ``cpu_template``)
            for step, waste in ((multiple, PAD_WASTE), (HALF_VECTOR, HALF_WASTE)):
                if spatial[i] % step and (-spatial[i]) % step * waste <= spatial[i]:
                    factors[i] = step
                    break
    return factors


def fuse_positions(sch, info: MainBlockInfo, lanes: int | None) -> bool:
    """On AVX2 (``lanes`` 8: 16 registers), fuse the image rows and columns of an NHWC 1x1
    convolution of stride 1 whose rows are shorter than ``SHORT_ROW`` or prime-like (no
    divisor up to ``POSITION_TILE``: SqueezeNet's 13x13, an image of 37) into one positions axis
    (its unit window axes dropped, its input and output laid out by position), and return
    whether it did (``pad_ragged`` then pads it to a multiple of ``POSITION_TILE``); where it
    does not apply or TVM refuses, the schedule is unchanged. ResNeXt-50's 7x7 layers took
    1.2x less time with 6 x 2-vector tiles over 54 positions than with 7 x 1 over rows of 7
    (Zen 3)."""
    if not lanes or vector_registers(lanes) > 16:
        return False
    kinds = [int(iv.iter_type) for iv in sch.get(sch.get_sblock(info.name)).iter_vars]
    if kinds != [0, 0, 0, 0, 2, 2, 2] or not info.reads:
        return False
    (n, _), (y, h), (x, w), _ = info.spatial
    ry, rx, rc = (name for name, _ in info.reduce)
    data, dims, _ = info.reads[0]
    buffer = _buffer(sch, info.name, data)
    # a prime row (SqueezeNet's 13x13) has no tile of rows either: 1.8x faster fused
    short = w < SHORT_ROW or not any(w % d == 0 for d in range(2, POSITION_TILE + 1))
    if (h < 2 or not short or w % POSITION_TILE == 0
            or [e for _, e in info.reduce[:2]] != [1, 1]
            or dims != (frozenset({n}), frozenset({y, ry}), frozenset({x, rx}), frozenset({rc}))
            or [int(d) for d in buffer.shape[1:3]] != [h, w]):  # stride 1, no padding
        return False
    if not _fuse_rows(sch.copy(), info, w):
        return False
    return _fuse_rows(sch, info, w)


def _fuse_rows(sch, info: MainBlockInfo, w: int) -> bool:
    """``fuse_positions``' steps on ``sch``; False where TVM refuses one."""
    from tvm.tirx import IndexMap

    params = {p.name for p in sch.mod["main"].params}
    main = sch.get_sblock(info.name)
    by_position = IndexMap.from_func(lambda n, y, x, c: [n, y * w + x, c], ndim=4)
    try:
        if sch.get(main).writes[0].source.name in params:
            sch.cache_write(main, 0, "global")  # the function's output keeps its layout
        reads = [r.source.name for r in sch.get(main).reads]
        index = reads.index(info.reads[0][0])
        if reads[index] in params:
            sch.cache_read(main, index, "global")
        sch.transform_layout(main, ("write", 0), by_position)
        sch.transform_layout(main, ("read", index), by_position)
        sch.transform_block_layout(main, IndexMap.from_func(
            lambda n, y, x, f, ry, rx, rc: [n, y * w + x, f, rc], ndim=7))
        # the epilogue iterates over positions too: TVM's region of a (row, column) write-back
        # computed at a tile of positions came out short (5 of 7 columns, wrong results)
        for block in _downstream(sch, main):
            if len(sch.get(block).iter_vars) == 4:
                sch.transform_block_layout(block, by_position)
        (n, _), (y, _), (x, _), (f, _) = info.spatial
        sch.annotate(sch.get_sblock(info.name), AXIS_NAMES,
                     [n, f"{y}_{short_name(x)}", f, info.reduce[2][0]])
    except Exception:  # TVM's ScheduleError
        return False
    return True


def _buffer(sch, block: str, name: str):
    return next(r.source for r in sch.get(sch.get_sblock(block)).reads if r.source.name == name)


def _drop_axes(sch, name: str, ndim: int, units: list, factors: list) -> bool:
    """Remove the block's unit iterators ``units``, then pad it by ``factors`` (the others');
    False where TVM refuses either step."""
    from tvm.tirx import IndexMap

    kept = [i for i in range(ndim) if i not in units]
    block = sch.get_sblock(name)
    names = [iv.var.name for iv in sch.get(block).iter_vars]
    try:
        sch.transform_block_layout(block, IndexMap.from_func(
            lambda *ivs: [ivs[i] for i in kept], ndim=ndim))
        # TVM names the new iterators v0, v1...: the knobs keep the old names (``analyze``)
        sch.annotate(sch.get_sblock(name), AXIS_NAMES, [names[i] for i in kept])
        sch.pad_einsum(sch.get_sblock(name), [factors[i] for i in kept])
    except Exception:  # TVM's ScheduleError
        return False
    return True


def _read_along(sch, info, axis: int) -> int:
    """Elements of the main block's inputs indexed by spatial axis ``axis``."""
    name = info.spatial[axis][0]
    block = sch.get(sch.get_sblock(info.name))
    total = 0
    inputs = [r for r in block.reads if r.source.name != block.writes[0].source.name]
    for (_, dims, _), region in zip(info.reads, inputs):  # ``analyze`` keeps their order
        if any(name in used for used in dims):
            size = 1
            for d in region.source.shape:
                size *= int(d)
            total += size
    return total


def _is_chain(sch, main) -> bool:
    consumers = list(sch.get_consumers(main))
    while len(consumers) == 1:
        consumers = list(sch.get_consumers(consumers[0]))
    return not consumers


def _downstream(sch, main) -> list:
    """Every block that reads what ``main`` writes, directly or through others."""
    seen, out, todo = set(), [], list(sch.get_consumers(main))
    while todo:
        block = todo.pop()
        name = sch.get(block).name_hint
        if name not in seen:
            seen.add(name)
            out.append(block)
            todo.extend(sch.get_consumers(block))
    return out


def _spatial_size(block) -> int:
    size = 1
    for iv in block.iter_vars:
        if int(iv.iter_type) == 0:
            size *= int(iv.dom.extent)
    return size


def analyze(sch) -> MainBlockInfo:
    """Find the single reduction block and how each of its inputs is indexed."""
    from tvm.tirx.analysis import undefined_vars

    func = sch.mod["main"]
    params = {p.name for p in func.params}
    reductions = []
    for block_rv in sch.get_child_blocks(sch.get_sblock("root")):
        block = sch.get(block_rv)
        kinds = [iv.iter_type for iv in block.iter_vars]
        if 2 in kinds:
            reductions.append(block)
    if len(reductions) != 1:
        raise TemplateMismatch(f"the function needs exactly one reduction block, found {len(reductions)}")
    block = reductions[0]
    if not any(int(iv.iter_type) == 0 for iv in block.iter_vars):
        raise TemplateMismatch(f"block {block.name_hint} reduces to a scalar: no axis to tile")
    rename = _iter_names(block)
    spatial, reduce = [], []
    for iv in block.iter_vars:
        if iv.iter_type not in (0, 2):
            raise TemplateMismatch(f"block {block.name_hint}: unsupported iterator kind {iv.iter_type}")
        (spatial if iv.iter_type == 0 else reduce).append(
            (rename.get(iv.var.name, iv.var.name), int(iv.dom.extent)))
    reads = []
    for region in block.reads:
        buf = region.source
        if buf.name == block.writes[0].source.name:
            continue
        dims = tuple(frozenset(rename.get(v.name, v.name) for v in undefined_vars(r.min))
                     for r in region.region)
        reads.append((buf.name, dims, buf.name in params))
    hint = block.annotations.get(VECTOR_AXIS)
    return MainBlockInfo(block.name_hint, tuple(spatial), tuple(reduce), tuple(reads),
                         layout_free_params(func),
                         next((n for n, _ in spatial if short_name(n) == str(hint)), None))


def group_width(sch, info: MainBlockInfo, axis: str) -> int | None:
    """Output channels per group of a grouped convolution in TOPI's form: ``c`` where one
    dimension of an input of the main block is ``axis // c`` plus a reduction axis
    (``x[..., ff // 8 * 8 + rc]``), else None. A vector of ``axis`` wider than one group reads
    that input through a gather. (A depthwise multiplier's ``c // 2`` has no reduction.)"""
    from tvm.ir.prim.expr import BinaryOpExpr, FloorDiv, IntImm
    from tvm.tirx.analysis import undefined_vars

    block = sch.get(sch.get_sblock(info.name))
    names = _iter_names(block)
    var = next((iv.var for iv in block.iter_vars
                if short_name(names.get(iv.var.name, iv.var.name)) == axis), None)
    if var is None:
        return None
    reduce = {iv.var.name for iv in block.iter_vars if int(iv.iter_type) == 2}
    found = []

    def walk(expr):
        if isinstance(expr, FloorDiv) and expr.a.same_as(var) and isinstance(expr.b, IntImm):
            found.append(int(expr.b.value))
        elif isinstance(expr, BinaryOpExpr):
            walk(expr.a)
            walk(expr.b)

    for region in block.reads:
        for r in region.region:
            if any(v.name in reduce for v in undefined_vars(r.min)):
                walk(r.min)
    return min(found) if found else None


def _iter_names(block) -> dict[str, str]:
    """A block's iterator names as ``AXIS_NAMES`` gives them (from before a reshape), by the
    iterators' own names; empty where the block carries none."""
    given = block.annotations.get(AXIS_NAMES)
    return {iv.var.name: str(n) for iv, n in zip(block.iter_vars, given)} if given else {}


def layout_free_params(func) -> frozenset:
    """Names of the buffer parameters of ``func`` listed in its ``layout_free_buffers``."""
    attrs = func.attrs
    if attrs is None or "layout_free_buffers" not in attrs:
        return frozenset()
    # TVM 0.27's PrimFunc parameters are the buffers themselves
    return frozenset(func.params[int(i)].name for i in attrs["layout_free_buffers"])


def short_name(name: str) -> str:
    """A block iterator's name without TVM's ``v_`` prefix (knob names use it)."""
    return name[2:] if name.startswith("v_") else name
