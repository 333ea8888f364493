"""Transposed convolutions in the NHWC pipeline, as ordinary convolutions and a reshuffle.

TVM 0.27's ``conv2d_transpose`` rule takes NCHW data with an IOHW kernel only (any other layout
reaches the VM unlowered and fails the build), and TOPI's kernel dilates its input with zeros:
``stride^2`` times the work. A transposed convolution of stride ``s`` computes each output
phase ``(y mod s, x mod s)`` as an ordinary convolution of the input with a subset of its taps
(the sub-pixel decomposition). All phases together are one stride-1 NHWC convolution to
``s^2 * Cout`` channels, with as many taps per axis as the phases' input offsets span (a tap a
phase does not use is zero), followed by a depth-to-space reshuffle and, where the output is
not a multiple of ``s``, a crop. U-Net's kernel = stride is the one-tap case (a 1x1
convolution); a 4x4 stride-2 upsampling (FPN necks, GAN generators, segmentation decoders)
becomes a 3x3 convolution, which the conv2d template and Winograd then take: 2.25x the useful
multiplications against TOPI's 4x. Any other kind (groups, dilation, a weight computed at run
time with padding) runs in NCHW between two transposes, as the model had it.
"""
from __future__ import annotations

import numpy as np


def plan(size: int, kernel: int, stride: int, pad: int, out: int):
    """Per axis: ``(taps, pad_before, pad_after, rows, weights)`` where the ordinary
    convolution reads ``taps`` positions from ``pad_before`` before each output row on, makes
    ``rows`` rows per phase (``rows * stride >= out``), and ``weights[phase][tap]`` is the
    transposed kernel's index used there (``-1``: a zero). None when the input would have to be
    cropped first (a padding larger than the kernel)."""
    rows = -(-out // stride)
    offsets = {}
    for phase in range(stride):
        first, shift = divmod(phase + pad, stride)  # out[s q + phase] reads x[q + first - j]
        taps = -(-(kernel - shift) // stride)  # kernel index shift + s j for j < taps
        offsets[phase] = (first, shift, taps)
    low = min(first - taps + 1 for first, _, taps in offsets.values())
    high = max(first for first, _, _ in offsets.values())
    if low > 0:
        return None
    span = high - low + 1
    before = -low
    after = rows + span - 1 - size - before
    if after < 0:
        return None
    weights = []
    for phase in range(stride):
        first, shift, taps = offsets[phase]
        row = []
        for t in range(span):  # reads x[q + low + t] = x[q + first - j]
            j = first - low - t
            row.append(shift + stride * j if 0 <= j < taps else -1)
        weights.append(row)
    return span, before, after, rows, weights


def subpixel(call, builder):
    """The NHWC expression computing ``call`` (an NHWC transposed convolution of a constant
    IOHW-permuted kernel, groups 1, dilation 1, static shapes), or None when it does not fit."""
    import tvm
    from tvm import relax

    attrs = call.attrs
    data, weight = call.args
    if (str(attrs.data_layout), str(attrs.out_layout)) != ("NHWC", "NHWC") \
            or int(attrs.groups) != 1 or any(int(d) != 1 for d in attrs.dilation) \
            or not isinstance(weight, tvm.ir.GenericConst):
        return None
    try:
        n, h, w, cin = (int(d) for d in data.ty.shape)
        _, oh, ow, cout = (int(d) for d in call.ty.shape)
    except (TypeError, ValueError):  # a symbolic dimension
        return None
    # [i, o, kh, kw] from the kernel's layout
    kernel = np.transpose(weight.value.numpy(), [str(attrs.kernel_layout).index(c)
                                                 for c in "IOHW"])
    sh, sw = (int(s) for s in attrs.strides)
    top, left = int(attrs.padding[0]), int(attrs.padding[1])
    rows = plan(h, kernel.shape[2], sh, top, oh)
    cols = plan(w, kernel.shape[3], sw, left, ow)
    if rows is None or cols is None:
        return None
    th, tw = rows[0], cols[0]
    # HWIO [th, tw, Cin, (phase_y, phase_x, Cout)], zero where a phase does not use a tap
    new = np.zeros((th, tw, cin, sh, sw, cout), kernel.dtype)
    for py in range(sh):
        for px in range(sw):
            for ty in range(th):
                for tx in range(tw):
                    ky, kx = rows[4][py][ty], cols[4][px][tx]
                    if ky >= 0 and kx >= 0:
                        new[ty, tx, :, py, px, :] = kernel[:, :, ky, kx]
    conv = builder.emit(relax.op.nn.conv2d(
        data, relax.const(np.ascontiguousarray(new.reshape(th, tw, cin, -1))),
        padding=(rows[1], cols[1], rows[2], cols[2]), data_layout="NHWC",
        kernel_layout="HWIO", out_layout="NHWC", out_dtype=str(call.ty.dtype)))
    qh, qw = rows[3], cols[3]
    out = builder.emit(relax.op.reshape(conv, (n, qh, qw, sh, sw, cout)))
    out = builder.emit(relax.op.permute_dims(out, [0, 1, 3, 2, 4, 5]))
    out = relax.op.reshape(out, (n, qh * sh, qw * sw, cout))
    if (qh * sh, qw * sw) == (oh, ow):
        return out
    return relax.op.strided_slice(builder.emit(out), axes=[1, 2], begin=[0, 0], end=[oh, ow])


def depth_to_space3d(call, builder):
    """The NDHWC expression computing ``call`` (a transposed 3-D convolution whose constant
    kernel equals its stride, as a 3-D U-Net's upsampling: no padding, dilation or groups), or
    None when it does not fit: one 1x1x1 convolution to ``kd*kh*kw*Cout`` channels, then each
    voxel's block moved into place (TOPI's NCDHW kernel dilates its input instead: 8 times the
    work for a stride of 2)."""
    import tvm
    from tvm import relax

    attrs = call.attrs
    data, weight = call.args
    if (str(attrs.data_layout), str(attrs.out_layout)) != ("NDHWC", "NDHWC") \
            or int(attrs.groups) != 1 or any(int(d) != 1 for d in attrs.dilation) \
            or any(int(v) != 0 for v in list(attrs.padding) + list(attrs.output_padding)) \
            or not isinstance(weight, tvm.ir.GenericConst):
        return None
    try:
        n, d, h, w, cin = (int(v) for v in data.ty.shape)
        cout = int(call.ty.shape[4])
    except (TypeError, ValueError):  # a symbolic dimension
        return None
    kernel = np.transpose(weight.value.numpy(), [str(attrs.kernel_layout).index(c)
                                                 for c in "IODHW"])  # [i, o, kd, kh, kw]
    strides = [int(s) for s in attrs.strides]
    if list(kernel.shape[2:]) != strides:
        return None
    kd, kh, kw = strides
    # DHWIO [1, 1, 1, Cin, (a, b, c, Cout)]
    new = np.ascontiguousarray(np.transpose(kernel, [0, 2, 3, 4, 1])).reshape(
        1, 1, 1, cin, kd * kh * kw * cout)
    dtype = str(call.ty.dtype)
    out = builder.emit(relax.op.nn.conv3d(
        data, relax.const(new.astype(dtype)), data_layout="NDHWC", kernel_layout="DHWIO",
        out_layout="NDHWC", out_dtype=dtype))
    out = builder.emit(relax.op.reshape(out, (n, d, h, w, kd, kh, kw, cout)))
    out = builder.emit(relax.op.permute_dims(out, [0, 1, 4, 2, 5, 3, 6, 7]))
    return relax.op.reshape(out, (n, d * kd, h * kh, w * kw, cout))


def transposed3d(call, builder):
    """What a transposed 3-D convolution in a layout TOPI cannot take (NDHWC after the layout
    conversion) becomes: ``depth_to_space3d`` where it fits, else the same operator in NCDHW
    between two transposes; None for one already in NCDHW or a layout this does not know."""
    from tvm import relax

    attrs = call.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    plain = ("NCDHW", "IODHW", "NCDHW")
    if layouts == plain or not all(sorted(a) == sorted(b) for a, b in zip(layouts, plain)):
        return None
    out = depth_to_space3d(call, builder)
    if out is not None:
        return out
    data, weight = call.args
    axes = [layouts[0].index(c) for c in plain[0]]
    if axes != sorted(axes):
        data = builder.emit(relax.op.permute_dims(data, axes))
    axes = [layouts[1].index(c) for c in plain[1]]
    if axes != sorted(axes):
        weight = builder.emit(relax.op.permute_dims(weight, axes))
    out = builder.emit(relax.op.nn.conv3d_transpose(
        data, weight, strides=attrs.strides, padding=attrs.padding,
        output_padding=attrs.output_padding, dilation=attrs.dilation, groups=attrs.groups,
        data_layout="NCDHW", kernel_layout="IODHW", out_layout="NCDHW",
        out_dtype=str(call.ty.dtype)))
    return relax.op.permute_dims(out, [plain[2].index(c) for c in layouts[2]])
