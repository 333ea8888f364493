"""Seeds of ``cuda.gemm``: the classic SGEMM tiles and the tiles that fill the GPU's SMs,
under the pipelines most likely to win, fitted to the extents' divisors."""
from __future__ import annotations

import math

from .analysis import short_name
from .cuda_gemm import K_PARTS, check_limits
from .cuda_gemm_info import prepare_gemm
from .space import InvalidConfigError

SM_COUNT = 132  # H100 SXM: the grid sizes a first batch should fill
# (BM, BN, rows, cols per thread): the classic SGEMM tiles, fullest register tiles first
SEED_TILES = ((64, 64, 4, 4), (32, 64, 4, 4), (64, 32, 4, 4), (128, 128, 8, 8),
              (64, 128, 4, 8), (128, 64, 8, 4), (32, 32, 2, 2), (32, 32, 4, 4),
              (64, 64, 8, 4))  # (cuBLAS' FP32 tile on sm_90: 128 threads of 8x4)
# how the K tiles overlap the FMAs: (pipeline, transpose, K tile); every tile gets the first
# round, then every tile the second
SEED_ROUNDS = ((("prefetch", True, 16), ("async3", False, 16)),
               (("double", True, 8), ("async2", True, 16), ("async4", False, 16)))


def gemm_seeds(space, prim_func, lanes: int = 0, threads: int = 0,
               limit: int = 12) -> list:
    """Up to ``limit`` distinct valid configs of ``space`` (``cuda.gemm`` on ``prim_func``):
    the classic tiles (``SEED_TILES``, fitted to the extents' divisors) and the tiles that fill
    ``SM_COUNT`` SMs with one or two blocks each, with ``float4`` copies and K-major panels,
    under the pipelines of ``SEED_ROUNDS``; a grid of one wave or less also with its K tiles
    sliced in two or K split in two or three (``k_parts``). ``lanes`` and ``threads`` (the CPU seeds'
    arguments) are ignored."""
    from tvm.s_tir import Schedule

    from .config import Config

    try:
        _, info, _ = prepare_gemm(Schedule(prim_func))
    except Exception:  # noqa: BLE001 - not a GEMM, or a step TVM refused: no seeds
        return []
    knobs = {k.name for k in space.knobs}
    names = [f"tile_{short_name(n)}" for n in (info.m[0], info.n[0], info.k[0])]
    if not set(names) <= knobs:
        return []
    m, n, k = info.m[1], info.n[1], info.k[1]
    batch = math.prod(e for _, e in info.batch)
    tiles = [(_fit(m, bm, rm), _fit(n, bn, rn))
             for bm, bn, rm, rn in (*SEED_TILES, *_filling_tiles(m, n, batch))]
    out: dict = {}
    for variants in SEED_ROUNDS:
        for split_m, split_n in dict.fromkeys(tiles):
            for pipeline, transpose, k_tile in variants:
                if info.padded and pipeline.startswith("async"):
                    # a padded panel is copied under a bounds test, which cp.async cannot do
                    pipeline = "double" if pipeline == "async3" else "prefetch"
                bm, bn = math.prod(split_m[1:]), math.prod(split_n[1:])
                bk = _largest_divisor(k, k_tile if bm * bn < 128 * 128 else 8)
                split_k = (k // bk, bk)
                blocks = batch * split_m[0] * split_n[0]
                # a grid of one wave or less: its K also sliced between more threads, or
                # split between two or three times the blocks
                parts = ("none", "slice2", "split2", "split3") if blocks <= SM_COUNT else ("none",)
                for k_parts in parts:
                    slices, splits = K_PARTS[k_parts]
                    try:
                        check_limits(info, split_m, split_n, split_k, pipeline, transpose, 4,
                                     slices, splits)
                    except InvalidConfigError:
                        continue
                    config = Config({names[0]: split_m, names[1]: split_n, names[2]: split_k,
                                     "pipeline": pipeline, "transpose": transpose, "pad": 4,
                                     "k_parts": k_parts})
                    if config in space:
                        out[config] = None
                    if len(out) >= limit:
                        return list(out)
    return list(out)


def _fit(extent: int, block: int, per_thread: int) -> tuple[int, int, int, int]:
    """``(blocks, V, T, I)``: a block tile of ``block`` rows (else the divisor of ``extent``
    nearest to it, or all of a shorter extent) with ``per_thread`` rows per thread (else the
    largest divisor of the tile below it), in runs of up to 4 (``I``) ``V`` times."""
    if extent % block:
        near = [d for d in range(block // 2, 2 * block + 1) if d and extent % d == 0]
        block = min(near, key=lambda d: abs(math.log(d / block))) if near else \
            _largest_divisor(extent, block)
    per_thread = _largest_divisor(block, per_thread)
    inner = 4 if per_thread % 4 == 0 else per_thread
    return extent // block, per_thread // inner, block // per_thread, inner


def _filling_tiles(m: int, n: int, batch: int) -> list[tuple[int, int, int, int]]:
    """Block tiles of 16-128 rows whose grid fills the SMs once or twice without a partial
    wave of few blocks (``SM_COUNT`` 132: 128 blocks of 32x96 for a 128x3072 output), with
    4x4 (or 4x6, 4x3 ...) per thread; the largest tiles first."""
    found = []
    for bm in (128, 64, 32, 16):
        for bn in range(16, 257, 8):
            if m % bm or n % bn:
                continue
            blocks = batch * (m // bm) * (n // bn)
            for waves in (1, 2):
                if 0.9 * waves * SM_COUNT <= blocks <= waves * SM_COUNT:
                    rn = next((r for r in (4, 6, 3, 8, 2) if bn % r == 0), None)
                    if rn is not None:
                        found.append((waves, -bm * bn, (bm, bn, 4, rn)))
    return [t for *_, t in sorted(found)][:4]


def _largest_divisor(extent: int, most: int) -> int:
    return max(d for d in range(1, min(extent, most) + 1) if extent % d == 0)
