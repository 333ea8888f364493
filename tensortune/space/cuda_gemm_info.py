"""What ``cuda.gemm`` reads from a function: its matrix product (``GemmInfo``: M, N, K, batch
axes, each operand's layout) and the blocks around it (producers inlined, one epilogue chain)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .analysis import TemplateMismatch

# an axis of more than RAGGED_MIN whose largest divisor up to 32 is under RAGGED_DIVISOR (197
# tokens: prime) is padded to a multiple of RAGGED_MULTIPLE: its tiles were 1 or 197 rows
RAGGED_MIN, RAGGED_DIVISOR, RAGGED_MULTIPLE = 32, 4, 16

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
    # operands padded for a ragged axis (``pad_ragged``): their zero-filling copy is inlined
    # into the shared-memory copy, so that it reads the real buffer under a bounds test
    padded: tuple[str, ...] = ()


def pad_ragged(sch, main) -> dict[str, object]:
    """Pad ``main``'s ragged axes (``RAGGED_*``) with TVM's ``pad_einsum``: its operands read
    from zero-filled padded copies, its result written to a padded buffer and copied out; the
    copies' blocks by buffer name (empty where nothing is ragged or TVM refuses)."""
    factors = []
    for iv in sch.get(main).iter_vars:
        n = int(iv.dom.extent)
        ragged = n > RAGGED_MIN and max(d for d in range(1, 33) if n % d == 0) < RAGGED_DIVISOR
        factors.append(RAGGED_MULTIPLE if ragged else 1)
    if all(f == 1 for f in factors):
        return {}
    name = sch.get(main).name_hint
    before = {sch.get(b).name_hint for b in sch.get_producers(main)}
    try:
        sch.pad_einsum(main, factors)
    except Exception:  # noqa: BLE001 - TVM's ScheduleError: not an einsum; left as it is
        return {}
    main = sch.get_sblock(name)
    return {sch.get(b).writes[0].source.name: b for b in sch.get_producers(main)
            if sch.get(b).name_hint not in before}


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
        main, _, _ = prepare_gemm(sch)
        return main is not None
    except Exception:  # noqa: BLE001 - TemplateMismatch, or a schedule step TVM refused
        return False


def prepare_gemm(sch):
    """Inline producers into the main block and the epilogue chain into one consumer; the
    main block, its ``GemmInfo`` and the block that writes the result back (the consumer, or
    None for a cache write)."""
    root = sch.get_sblock("root")
    blocks = list(sch.get_child_blocks(root))
    reductions = [b for b in blocks if any(int(iv.iter_type) == 2 for iv in sch.get(b).iter_vars)]
    if len(reductions) != 1:
        raise TemplateMismatch(f"a GEMM has one reduction block, found {len(reductions)}")
    main = reductions[0]
    name = sch.get(main).name_hint
    for producer in sch.get_producers(main):
        sch.compute_inline(producer)  # transposes, reshapes: read through by the shared copy
    pads = pad_ragged(sch, sch.get_sblock(name))
    info = dataclasses.replace(gemm_info(sch), padded=tuple(pads))
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
    left = len(sch.get_child_blocks(sch.get_sblock("root"))) - 1 - (consumer is not None) \
        - len(info.padded)
    if left:
        raise TemplateMismatch(f"{left} blocks besides the GEMM and its epilogue")
    return main, info, consumer
