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
    return MainBlockInfo(block.name_hint, tuple(spatial), tuple(reduce), tuple(reads))


def short_name(name: str) -> str:
    """A block iterator's name without TVM's ``v_`` prefix (knob names use it)."""
    return name[2:] if name.startswith("v_") else name
