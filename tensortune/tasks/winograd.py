"""Winograd convolution F(m x m, 3 x 3) for the 3x3 stride-1 convolutions of an NHWC model.

A direct 3x3 convolution spends 9 multiply-adds per input channel and output; Winograd's
minimal filtering computes an ``m x m`` output tile from an ``(m+2) x (m+2)`` input tile with
``(m+2)^2`` of them, 2.25x fewer at ``m`` = 2 and 4x fewer at ``m`` = 4. The rewrite replaces
such a ``conv2d(x, W)`` (W a constant) by three operators that the CPU template tunes like any
other (TVM's TOPI formulation, in NHWC):

- the input transform ``V = B^T d B`` of every tile (``(m+2)^2 x tiles x C_in``), in two
  separable passes;
- one batched matrix product per transformed point, ``M = V U`` (``(m+2)^2`` GEMMs of
  ``tiles x C_in`` by ``C_in x C_out``): the bulk of the work, a plain reduction;
- the output transform ``Y = A^T M A``, cropped to the output, with the convolution's bias,
  activation and residual fused after it as they were after the convolution.

The weight transform ``U = G g G^T`` runs here in numpy, once: the model holds ``U``.
"""
from __future__ import annotations

import functools

import numpy as np

from ..errors import strict

KERNEL = 3
REWRITE = "Winograd"


@functools.lru_cache(maxsize=8)
def _matrices(tile: int):
    """Winograd's (A, B, G) for F(tile, 3), from TOPI's Cook-Toom construction (float64)."""
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    points = _interpolation_points(tile + KERNEL - 2)
    a, b, g = _cook_toom_convolution(points, tile, KERNEL)
    return np.asarray(a, np.float64), np.asarray(b, np.float64), np.asarray(g, np.float64)


def transform_weight(weight_hwio: np.ndarray, tile: int) -> np.ndarray:
    """``U[e1 * alpha + e2, ci, co] = (G g G^T)[e1, e2]`` for an HWIO 3x3 weight."""
    _, _, g = _matrices(tile)
    u = np.einsum("ak,bl,klio->abio", g, g, weight_hwio.astype(np.float64))
    alpha = tile + KERNEL - 1
    return u.reshape(alpha * alpha, *weight_hwio.shape[2:]).astype(weight_hwio.dtype)


def eligible(call, min_channels: int) -> bool:
    """A 3x3, stride-1, undilated, ungrouped NHWC/HWIO convolution of a constant weight with at
    least ``min_channels`` input and output channels (below that the GEMMs are too thin)."""
    from tvm.ir import GenericConst

    attrs = call.attrs
    if (attrs.data_layout != "NHWC" or attrs.kernel_layout != "HWIO" or attrs.out_layout != "NHWC"
            or int(attrs.groups) != 1 or not isinstance(call.args[1], GenericConst)):
        return False
    if any(int(s) != 1 for s in attrs.strides) or any(int(d) != 1 for d in attrs.dilation):
        return False
    kh, kw, cin, cout = (int(d) for d in call.args[1].value.shape)
    return (kh, kw) == (KERNEL, KERNEL) and min(cin, cout) >= min_channels


def _input_transform(data, tile: int, padding, out_h: int, out_w: int):
    """``V[e1, e2, p, c]``: each input tile ``d`` (p = n, tile row, tile column) as
    ``B^T d B``, in two passes (rows, then columns: ``2 alpha^3`` multiply-adds a tile and
    channel instead of ``alpha^4``) that share the leading axis ``e1``."""
    from tvm import te, topi
    from tvm.topi.nn.winograd_util import winograd_transform_matrices

    # call_te hands Python numbers over as TIR immediates
    tile, out_h, out_w, padding = int(tile), int(out_h), int(out_w), [int(p) for p in padding]
    n, h, w, c = (int(d) for d in data.shape)
    alpha = tile + KERNEL - 1
    rows, cols = -(-out_h // tile), -(-out_w // tile)
    top, left, bottom, right = padding
    # pad so that every tile's (alpha x alpha) window lies inside the padded input
    pad_bottom = rows * tile + KERNEL - 1 - h - top
    pad_right = cols * tile + KERNEL - 1 - w - left
    padded = topi.nn.pad(data, [0, top, left, 0], [0, max(bottom, pad_bottom),
                                                    max(right, pad_right), 0])
    _, b, _ = winograd_transform_matrices(tile, KERNEL, str(data.dtype))
    tiles = n * rows * cols

    def window(p, r1, r2, ci):
        tn, rest = p // (rows * cols), p % (rows * cols)
        return padded[tn, rest // cols * tile + r1, rest % cols * tile + r2, ci]

    r1 = te.reduce_axis((0, alpha), name="r1")
    half = te.compute((alpha, tiles, alpha, c),
                      lambda e1, p, r2, ci: te.sum(b[r1][e1] * window(p, r1, r2, ci), axis=r1),
                      name="winograd_input_rows")
    r2 = te.reduce_axis((0, alpha), name="r2")
    return te.compute((alpha, alpha, tiles, c),
                      lambda e1, e2, p, ci: te.sum(half[e1, p, r2, ci] * b[r2][e2], axis=r2),
                      name="winograd_input")


def _output_transform(product, batch: int, out_h: int, out_w: int, tile: int):
    """``Y[n, y, x, co]``: each tile's ``A^T M A``, cropped to the output's size."""
    from tvm import te
    from tvm.topi.nn.winograd_util import winograd_transform_matrices

    batch, out_h, out_w, tile = int(batch), int(out_h), int(out_w), int(tile)
    alpha = tile + KERNEL - 1
    cols = -(-out_w // tile)
    rows = -(-out_h // tile)
    a, _, _ = winograd_transform_matrices(tile, KERNEL, str(product.dtype))
    r1 = te.reduce_axis((0, alpha), name="r1")
    r2 = te.reduce_axis((0, alpha), name="r2")
    cout = int(product.shape[2])

    def compute(tn, y, x, co):
        p = tn * rows * cols + y // tile * cols + x // tile
        return te.sum(product[r1 * alpha + r2, p, co] * a[r1][y % tile] * a[r2][x % tile],
                      axis=[r1, r2])

    return te.compute((batch, out_h, out_w, cout), compute, name="winograd_output")


# Each transformed weight is used once per tile: (m+2)^2 x C_in x C_out weights (1.8x the direct
# convolution's for F(2,3), 4x for F(4,3)) at 2 x tiles FLOPs per 4 bytes. Below 32 tiles (16
# FLOP a byte) the GEMMs stream their weights from memory: ResNet-18's 7x7 and 14x14 layers ran
# at 24-25% of the FMA peak in the model (Xeon, 2026-11-27), where a direct convolution uses
# each weight once per output pixel.
MIN_TILES = 32


def choose_tile(out_h: int, out_w: int, batch: int = 1) -> int | None:
    """The output tile ``m``: the one with the least transformed work ``(m+2)^2 x tiles``
    among those that leave at least ``MIN_TILES`` tiles (the GEMMs' rows); None when none
    does: the convolution stays direct."""
    best = None
    for tile in (2, 4):
        tiles = batch * -(-out_h // tile) * -(-out_w // tile)
        work = (tile + KERNEL - 1) ** 2 * tiles
        if tiles >= MIN_TILES and (best is None or work < best[0]):
            best = (work, tile)
    return best[1] if best else None


def winograd_pass(tile: int | None = None, min_channels: int = 32):
    """A module pass rewriting every eligible convolution (``eligible``) as Winograd
    F(``tile`` x ``tile``, 3 x 3); ``tile`` None picks it per layer (``choose_tile``)."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        def __init__(self, mod, failed: list):
            super().__init__(mod)
            self.failed = failed  # (call, error) of the convolutions left direct

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", "") != "relax.nn.conv2d" or not eligible(call,
                                                                                 min_channels):
                return call
            n, out_h, out_w, _ = (int(d) for d in call.ty.shape)
            if tile is None and choose_tile(out_h, out_w, n) is None:
                return call  # too few tiles to reuse the transformed weights
            try:
                return self._winograd(call)
            except Exception as err:  # that convolution stays direct; the others go on
                if strict():  # TENSORTUNE_STRICT: raise what would be swallowed
                    raise
                self.failed.append((call, err))
                return call

        def _winograd(self, call):
            data, weight = call.args
            n, h, w, _ = (int(d) for d in data.ty.shape)
            _, out_h, out_w, cout = (int(d) for d in call.ty.shape)
            padding = [int(p) for p in call.attrs.padding]
            m = tile or choose_tile(out_h, out_w, n)
            u = relax.const(transform_weight(weight.value.numpy(), m))
            v = self.builder_.call_te(_input_transform, data, m, padding, out_h, out_w,
                                      primfunc_name_hint="winograd_input")
            alpha, cin = m + KERNEL - 1, int(data.ty.shape[3])
            tiles = n * -(-out_h // m) * -(-out_w // m)
            v = self.builder_.emit(relax.op.reshape(v, (alpha * alpha, tiles, cin)))
            product = self.builder_.emit(relax.op.matmul(v, u))
            return self.builder_.call_te(_output_transform, product, n, out_h, out_w, m,
                                         primfunc_name_hint="winograd_output")

    @tvm.transform.module_pass(opt_level=0, name="TensortuneWinograd")
    def apply(mod, _ctx):
        failed: list = []
        return rewrite_functions(mod, Rewriter(mod, failed), failed, REWRITE)

    return apply


def rewrite_functions(mod, rewriter, failed: list, rewrite: str):
    """Every Relax function of ``mod`` through ``rewriter`` (whose builder collects the new
    PrimFuncs beside); the calls in ``failed`` (call, error) are named in one warning."""
    from tvm import relax

    from .rewriting import mutate_functions

    out = mutate_functions(rewriter, mod)
    if failed:
        warn_skipped(rewrite, [describe_conv(c) for c, _ in failed], failed[0][1])
        # a transform emitted before the error would otherwise run for nothing
        out = relax.transform.DeadCodeElimination()(out)
    return out


def describe_conv(call) -> str:
    """``conv2d 3x3 64->64 on 1x56x56x64`` (the weight's HWIO shape, the data's shape)."""
    try:
        kh, kw, cin, cout = (int(d) for d in call.args[1].ty.shape)
        shape = "x".join(str(int(d)) for d in call.args[0].ty.shape)
        return f"{call.op.name} {kh}x{kw} {cin}->{cout} on {shape}"
    except Exception:  # symbolic shapes: the operator's name is enough
        return str(call.op.name)


def warn_skipped(rewrite: str, calls: list[str], err: Exception) -> None:
    """One ``GraphRewriteWarning``: which calls ``rewrite`` left as they were, and why."""
    import warnings

    from .layout import GraphRewriteWarning

    first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), "")
    warnings.warn(f"{rewrite} left {len(calls)} operator(s) as they were: "
                  f"{'; '.join(calls[:5])}{' ...' if len(calls) > 5 else ''} "
                  f"({type(err).__name__}: {first[:200]})", GraphRewriteWarning, stacklevel=2)
