"""The CPU template for a fused recurrent layer (``frontend.recurrence_tir``).

Loop structure, per direction and step (both serial: each step needs the last one's state):

    direction                       (parallel when knob ``parallel`` is ``directions``)
      step
        gates: column block (parallel: ``gates``) . k (unrolled by ``tile_k``) . batch .
               column tile (unrolled) . vector        acc = h Rᵀ + Rb, h broadcast per k
        cell:  hidden units, vectorized               the gate equations, polynomial exp/tanh
        out:   hidden units, vectorized               the hidden state (a second activation)
        state: hidden units, vectorized               h, c for the next step

``Rᵀ`` is read along the gates, so a step streams it once from cache (an LSTM of 192 units:
590 KB, which stays in L2) into a register tile of accumulators.
"""
from __future__ import annotations

from .analysis import TemplateMismatch
from .loops import extent, vectorize_vectors

INIT, GATES, CELL, OUT, STATE = ("tt_rnn_init", "tt_rnn_gates", "tt_rnn_cell", "tt_rnn_out",
                                 "tt_rnn_state")
NAMED = (INIT, GATES, CELL, OUT, STATE)
LANES = 16  # AVX-512 floats: the widest vector a tile's inner factor may be
TILE_MAX = 128  # columns of one register tile (8 AVX-512 accumulators)
K_UNROLL_MAX = 8
# a step's product (hidden x gate columns) from which one direction's columns are split between
# the cores: a parallel launch a step costs about 1 us; an LSTM of 192 units (147k) gained 2.3 us
PARALLEL_MACS = 1 << 15


def is_recurrence(sch) -> bool:
    """Whether ``sch``'s function is a fused recurrent layer (found by its block names)."""
    names = {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}
    return set(NAMED) <= names


def shape_of(sch) -> dict:
    """Directions, batch, gate columns and hidden units of the layer."""
    ext = [int(iv.dom.extent) for iv in sch.get(sch.get_sblock(GATES)).iter_vars]
    return {"directions": ext[0], "batch": ext[2], "columns": ext[3], "hidden": ext[4]}


def recurrent_cpu(cfg, sch):
    """Define or apply the space (module docstring) on ``sch``."""
    if not is_recurrence(sch):
        raise TemplateMismatch("not a fused recurrent layer")
    shape = shape_of(sch)
    tile = cfg.split("tile_gates", shape["columns"], 2, max_inner=TILE_MAX)
    k_tile = cfg.split("tile_k", shape["hidden"], 2, max_inner=K_UNROLL_MAX)
    cell_tile = cfg.split("tile_cell", shape["hidden"], 2, max_inner=LANES)
    parallel = cfg.choice("parallel", ("none", "gates") + (
        ("directions",) if shape["directions"] > 1 else ()))

    gates = sch.get_sblock(GATES)
    d, _, b, j, k = sch.get_loops(gates)
    # the register tile: whole vectors of the widest power of two that divides it
    lanes = min(tile[1] & -tile[1], LANES)
    jo, jm, ji = sch.split(j, [tile[0], tile[1] // lanes, lanes])
    ko, ki = sch.split(k, list(k_tile))
    sch.reorder(jo, ko, ki, b, jm, ji)
    if parallel == "gates":
        sch.parallel(jo)
    elif parallel == "directions":
        sch.parallel(d)
    for loop in (ki, jm) + ((b,) if shape["batch"] <= 4 else ()):
        if extent(sch, loop) > 1:
            sch.unroll(loop)
    if lanes > 1:
        sch.vectorize(ji)
    sch.decompose_reduction(gates, ko)
    for name in (CELL, OUT, STATE, INIT):
        block = sch.get_sblock(name)
        *_, i = sch.get_loops(block)
        _, inner = sch.split(i, list(cell_tile))
        vectorize_vectors(sch, inner)
    return sch


def recurrent_seeds(space, sch, lanes: int = 16) -> list:
    """Configs of ``space`` an expert would try: the widest register tiles of whole vectors of
    columns, ``k`` unrolled by 4, the cell in whole vectors, and one way of using both cores:
    one direction each for a bidirectional layer; for one direction, the gate columns split
    between them when a step's product is large (``PARALLEL_MACS``), else one core. Only that
    way: a model that has never seen the function ranks the seeds (hardware-free), and chose
    one core for an LSTM of 192 units, 5.6 us a step where split columns take 3.5."""
    from .config import Config

    knobs = {k.name: k for k in space.knobs}
    shape = shape_of(sch)
    widest = max(c[1] & -c[1] for c in knobs["tile_gates"].candidates)
    gates = [c for c in knobs["tile_gates"].candidates if c[1] % min(lanes, widest) == 0]
    # the widest tiles first (an LSTM of 192 units, tuned: 347 us with 8 vectors of columns,
    # 358 with 4, 367 with 2); k's unroll changed 2% at most
    gates.sort(key=lambda c: abs(c[1] - TILE_MAX))
    k_tiles = sorted(knobs["tile_k"].candidates, key=lambda c: abs(c[1] - 4))
    cells = sorted(knobs["tile_cell"].candidates, key=lambda c: -c[1])
    if shape["directions"] > 1:
        parallel = "directions"  # a bidirectional GRU of 96 units: 116 us, split columns 204
    else:
        parallel = "gates" if shape["hidden"] * shape["columns"] >= PARALLEL_MACS else "none"
    configs = [Config({"tile_gates": gate, "tile_k": k_tiles[0], "tile_cell": cells[0],
                       "parallel": parallel}) for gate in gates[:4]]
    return [c for c in configs if c in space]
