"""Fold inference batch-norm into the preceding convolution, computing the new weights in numpy.

TVM's ``FoldBatchnormToConv2D`` does the same rewrite but leaves the arithmetic on the weights
to ``FoldConstant``, which compiles a kernel for every elementwise step of every layer (about
10 s for ResNet-18 on two cores); numpy does it in milliseconds.

Matches ``batch_norm(conv2d(x, W) [+ bias], gamma, beta, mean, var)[0]`` with NCHW data, OIHW
weights, channel axis 1 and constant parameters (``bias`` a constant, possibly reshaped), and
rewrites it to ``conv2d(x, W * s) + (bias - mean) * s + beta`` with ``s = gamma / sqrt(var + eps)``.
"""
from __future__ import annotations

import numpy as np


def _const_value(expr):
    """The numpy value of a constant or of a reshape of one; None otherwise."""
    from tvm import relax
    from tvm.ir import GenericConst

    if isinstance(expr, GenericConst):
        return _np(expr)
    if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.reshape":
        inner = _const_value(expr.args[0])
        shape = getattr(expr.args[1], "values", None)
        if inner is not None and shape is not None:
            return inner.reshape([int(d) for d in shape])
    return None


def _np(const) -> np.ndarray:
    return const.value.numpy()


def fold_batch_norm_pass():
    """A function pass applying the rewrite to every Relax function."""
    from tvm import relax
    from tvm.relax.dpl import TupleGetItemPattern, is_const, is_op, rewrite_call, wildcard

    data, weight = wildcard(), is_const()
    conv = is_op("relax.nn.conv2d")(data, weight)
    bias = wildcard()
    conv_bias = is_op("relax.add")(conv, bias)
    gamma, beta, mean, var = is_const(), is_const(), is_const(), is_const()
    bn = is_op("relax.nn.batch_norm")(conv | conv_bias, gamma, beta, mean, var)
    pattern = TupleGetItemPattern(bn, 0)

    def rewrite(expr, m):
        conv_call, bn_call = m[conv], m[bn]
        ca, ba = conv_call.attrs, bn_call.attrs
        if (ca.data_layout != "NCHW" or ca.kernel_layout != "OIHW" or ca.out_layout != "NCHW"
                or int(ba.axis) != 1):
            return expr
        w = _np(m[weight])
        channels = w.shape[0]
        b = np.zeros(channels)
        if conv_bias in m:
            value = _const_value(m[bias])
            if value is None or value.size != channels:
                return expr
            b = value.reshape(channels)
        g = _np(m[gamma]).astype(np.float64) if ba.scale else np.ones(channels)
        shift = _np(m[beta]).astype(np.float64) if ba.center else np.zeros(channels)
        mu = _np(m[mean]).astype(np.float64)
        s = g / np.sqrt(_np(m[var]).astype(np.float64) + float(ba.epsilon))
        new_w = (w * s[:, None, None, None]).astype(w.dtype)
        new_b = ((b - mu) * s + shift).astype(w.dtype).reshape(1, channels, 1, 1)
        folded = relax.Call(conv_call.op, [m[data], relax.const(new_w)], ca)
        return relax.op.add(folded, relax.const(new_b))

    @relax.transform.function_pass(opt_level=0, name="TensortuneFoldBatchNorm")
    def fold(func, _mod, _ctx):
        return rewrite_call(pattern, rewrite, func)

    return fold
