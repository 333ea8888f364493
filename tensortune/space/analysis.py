"""What a template sees of a TIR function: its one reduction block and how inputs are indexed."""
from __future__ import annotations

from dataclasses import dataclass

from .space import InvalidConfigError


class TemplateMismatch(InvalidConfigError):
    """The function has no block that this template can schedule."""


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


def is_tiled(sch) -> bool:
    """Whether ``cpu_template``'s tiling applies: exactly one reduction block, writing one
    buffer, whose consumers form a single chain (a convolution, a matmul, pooling). The rest
    (elementwise copies, softmax, layer norm) is ``cpu_rowwise``'s."""
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    reductions = [b for b in blocks if any(int(iv.iter_type) == 2 for iv in sch.get(b).iter_vars)]
    if len(reductions) != 1 or len(sch.get(reductions[0]).writes) != 1:
        return False
    consumers = list(sch.get_consumers(reductions[0]))
    while len(consumers) == 1:
        consumers = list(sch.get_consumers(consumers[0]))
    return not consumers


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
    spatial, reduce = [], []
    for iv in block.iter_vars:
        if iv.iter_type not in (0, 2):
            raise TemplateMismatch(f"block {block.name_hint}: unsupported iterator kind {iv.iter_type}")
        (spatial if iv.iter_type == 0 else reduce).append((iv.var.name, int(iv.dom.extent)))
    reads = []
    for region in block.reads:
        buf = region.source
        if buf.name == block.writes[0].source.name:
            continue
        dims = tuple(frozenset(v.name for v in undefined_vars(r.min)) for r in region.region)
        reads.append((buf.name, dims, buf.name in params))
    return MainBlockInfo(block.name_hint, tuple(spatial), tuple(reduce), tuple(reads),
                         layout_free_params(func))


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
