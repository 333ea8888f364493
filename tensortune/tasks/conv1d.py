"""1-D convolutions as 2-D convolutions of one row, so that they take the NHWC layout, the
convolution templates and their seeds.

Speech and sequence models (a wav2vec2-style feature encoder, a Conformer's depthwise block,
a convolutional position embedding) are built from ``Conv1d``. TVM has no schedule of its own
for ``conv1d`` and ours are written for ``conv2d``: left in NCW, the convolutions of a 1-D
feature encoder ran at 13-55% of the FMA peak, and a grouped 31-tap one at 1% (34.5 ms for a
network ONNX Runtime runs in 17.7; Zen 4, 2026-11-28). The same layers written as 1xk
``Conv2d`` ran at 92-97%.

``conv1d(x, w)`` becomes ``squeeze(conv2d(expand_dims(x, 2), w[:, :, None]), 2)`` (the
weight's new axis costs nothing: it is a constant). The elementwise work after it (a bias,
GELU, a batch-norm's scale and shift, an instance norm's mean and variance over the row, the
channel slices of a gate, a softmax over the channels) is then lifted to the one-row tensor
too, and ``expand_dims(squeeze(t, 2), 2)`` is ``t``: from
one convolution to the next the activations stay 4-D, so the layout conversion after this
rewrite keeps them channels-last with no transpose in between, and the elementwise work fuses
with the convolutions as in a 2-D network. Only with the NHWC layout: in NCHW a one-row
convolution gains nothing.
"""
from __future__ import annotations

from .rewriting import calls_op, mutate_functions, static_shape

REWRITE = "1-D convolution as 2-D"
ROW = 2  # the axis the rewrite adds: N, C, (1), W

# operators computed element by element, the tensor their first argument
UNARY = {"relax.abs", "relax.ceil", "relax.clip", "relax.cos", "relax.erf", "relax.exp",
         "relax.floor", "relax.log", "relax.negative", "relax.round", "relax.rsqrt",
         "relax.sigmoid", "relax.sin", "relax.sqrt", "relax.square", "relax.tanh",
         "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.leakyrelu", "relax.nn.relu",
         "relax.nn.silu"}
BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.power",
          "relax.maximum", "relax.minimum"}
REDUCTIONS = {"relax.mean", "relax.variance", "relax.sum", "relax.max", "relax.min"}
SOFTMAX = {"relax.nn.softmax", "relax.nn.log_softmax"}


def conv1d_as_conv2d_pass():
    """A module pass: every NCW/OIW ``conv1d`` of a constant weight as a one-row NCHW/OIHW
    ``conv2d``, and the elementwise work between such convolutions kept one-row (above)."""
    import tvm
    from tvm import relax
    from tvm.ir import GenericConst
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from .rewriting import bound_call

    @mutator
    class Lift(PyExprMutator):
        def row_of(self, var):
            """The 4-D one-row tensor that ``var`` is the squeeze of, else None."""
            while isinstance(var, relax.Var):  # through aliases (a reshape to its own shape)
                value = self.lookup_binding(var)
                if not isinstance(value, relax.Var):
                    break
                var = value
            call = bound_call(self, var, "relax.squeeze")
            if call is None or call.attrs.axis is None \
                    or [int(a) for a in call.attrs.axis] != [ROW]:
                return None
            shape = static_shape(call.args[0])
            return call.args[0] if shape and len(shape) == 4 and shape[ROW] == 1 else None

        def lifted(self, arg):
            """``arg`` as a one-row 4-D operand: the tensor it was squeezed from, or a
            constant reshaped to broadcast the same way (its last axis stays the row's)."""
            row = self.row_of(arg)
            if row is not None or not isinstance(arg, GenericConst):
                return row
            value = arg.value.numpy()
            if value.ndim == 0:
                return arg
            if value.ndim > 3:
                return None
            value = value.reshape((1,) * (3 - value.ndim) + value.shape)
            return relax.const(value.reshape(value.shape[:2] + (1,) + value.shape[2:]))

        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = getattr(call.op, "name", "")
            if name == "relax.nn.conv1d":
                return self.conv1d(call)
            if name == "relax.expand_dims" and [int(a) for a in call.attrs.axis] == [ROW]:
                row = self.row_of(call.args[0])
                return call if row is None else row
            if name == "relax.reshape" and static_shape(call) == static_shape(call.args[0]):
                return call.args[0]  # decomposed norms reshape to the same shape
            if name in UNARY:
                row = self.row_of(call.args[0])
                if row is not None:
                    return self.squeezed(relax.Call(call.op, [row, *call.args[1:]], call.attrs))
            elif name in BINARY and len(static_shape(call) or ()) == 3:
                rows = [self.lifted(a) for a in call.args]
                if None not in rows and any(self.row_of(a) is not None for a in call.args):
                    return self.squeezed(relax.Call(call.op, rows, call.attrs))
            elif name == "relax.strided_slice":  # a gate's halves (WaveNet, GLU)
                row = self.row_of(call.args[0])
                if row is not None:
                    axes = [self.axis(int(a)) for a in call.args[1].fields]
                    return self.squeezed(relax.op.strided_slice(
                        row, axes, *call.args[2:], assume_inbound=call.attrs.assume_inbound))
            elif name in SOFTMAX:  # over the channels, as a classifier per sample
                row = self.row_of(call.args[0])
                if row is not None:
                    op = getattr(relax.op.nn, name.split(".")[-1])
                    return self.squeezed(op(row, self.axis(int(call.attrs.axis))))
            elif name in REDUCTIONS and call.attrs.keepdims and call.attrs.axis is not None:
                row = self.row_of(call.args[0])
                if row is not None:
                    axes = [self.axis(int(a)) for a in call.attrs.axis]
                    op = getattr(relax.op, name.split(".")[-1])
                    return self.squeezed(op(row, axes, keepdims=True))
            return call

        @staticmethod
        def axis(axis: int) -> int:
            """An axis of the 3-D tensor as the axis of the one-row 4-D one."""
            return axis % 3 + (axis % 3 >= ROW)

        def conv1d(self, call):
            attrs = call.attrs
            if (attrs.data_layout != "NCW" or attrs.kernel_layout != "OIW"
                    or attrs.out_layout != "NCW" or not isinstance(call.args[1], GenericConst)):
                return call
            data, weight = call.args
            row = self.row_of(data)  # the convolution before it left a row
            if row is None:
                row = self.builder_.emit(relax.op.expand_dims(data, [ROW]))
            left, right = (int(p) for p in attrs.padding)
            conv = relax.op.nn.conv2d(
                row,
                relax.const(weight.value.numpy()[:, :, None, :]),
                strides=(1, int(attrs.strides[0])), padding=(0, left, 0, right),
                dilation=(1, int(attrs.dilation[0])), groups=int(attrs.groups),
                out_dtype=str(call.ty.dtype))
            return self.squeezed(conv)

        def squeezed(self, value):
            return relax.op.squeeze(self.builder_.emit(value), [ROW])

    @tvm.transform.module_pass(opt_level=0, name="TensortuneConv1dAsConv2d")
    def apply(mod, _ctx):
        if not calls_op(mod, "relax.nn.conv1d"):  # a model without one comes back as it was
            return mod
        out = mutate_functions(Lift(mod), mod)
        return relax.transform.DeadCodeElimination()(out)

    return apply

