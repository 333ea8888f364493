"""Execution ports of the CPU cores the static models know, by LLVM ``-mcpu`` name: how many
instructions of each class a core retires per cycle, and how wide its FP pipes are (Tuna's
static CPU model; shared by ``roofline`` and ``list_schedule``)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PortModel:
    """Instructions of each class one core retires per cycle (Zen 5 / Xeon defaults)."""

    fp: float = 2.0  # FMA and other FP arithmetic share two pipes ...
    fp_bits: int = 512  # ... this wide; a wider vector instruction takes several passes
    load: float = 2.0
    store: float = 1.0
    shuffle: float = 1.0
    issue: float = 6.0


# Cores whose FP pipes are narrower than their widest vectors (Zen 4 runs AVX-512 on 256-bit
# pipes, so a zmm FMA retires at one per cycle, not two); LLVM's -mcpu names.
PORTS = {"znver3": PortModel(fp_bits=256), "znver4": PortModel(fp_bits=256)}


def ports_of(target: dict) -> PortModel:
    """The port model of an LLVM CPU target, by its ``mcpu``."""
    return PORTS.get(target.get("mcpu", ""), PortModel())
