"""Group and instance norms, and per-channel constants, in a form the layout conversion carries.

ONNX has no group norm before opset 18: PyTorch exports ``GroupNorm`` as a reshape to
``(N, G, rest)``, an ``InstanceNormalization``, a reshape back and the affine scale and shift,
and TVM's importer decomposes ``InstanceNormalization`` into mean, variance and elementwise
operators whose scale and shift are constants of shape ``(C, 1, 1)``. ``ConvertLayout`` can
carry neither the reshapes nor a constant of lower rank than its tensor, so every such norm ran
in NCHW between two transposes of the whole activation (a diffusion U-Net's ten GroupNorms, a
3-D U-Net's instance norms).

``norms_pass``, before the layout conversion, puts the group norm pattern back as
``relax.nn.group_norm``, which ``ConvertLayout`` moves to NHWC with its channel axis, and gives
every constant operand of an elementwise operator the rank of the other operand (leading ones:
numerically nothing changes), so that it is permuted with it; an instance norm's mean and
variance then need nothing more. ``decompose_group_norms``, after the conversion, writes each
group norm as its mean and variance again, the channel axis split into groups where it is now
innermost: TOPI's own group norm reduces both moments in one tuple reduction, which no template
vectorizes (5% of the FMA peak, 3x the decomposed form's time).
"""
from __future__ import annotations

import numpy as np

from .rewriting import bound_call, float_scalar, mutate_functions, static_shape

REWRITE = "group and instance norms"
ELEMENTWISE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide",
               "relax.maximum", "relax.minimum", "relax.power")


def norms_pass():
    """A module pass: the decomposed group norms as ``relax.nn.group_norm``, and every
    lower-rank constant of an elementwise operator at its tensor's rank."""
    import tvm
    from tvm import relax
    from tvm.ir import GenericConst
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class Rewrite(PyExprMutator):
        def normalized(self, div):
            """``(x, eps)`` when ``div`` is ``(x - mean(x)) / sqrt(variance(x) + eps)`` over
            every axis after the second, else None."""
            sub = bound_call(self, div.args[0], "relax.subtract")
            root = bound_call(self, div.args[1], "relax.sqrt")
            plus = None if root is None else bound_call(self, root.args[0], "relax.add")
            if sub is None or plus is None:
                return None
            x = sub.args[0]
            mean = bound_call(self, sub.args[1], "relax.mean")
            var_ = bound_call(self, plus.args[0], "relax.variance")
            eps = float_scalar(plus.args[1])
            shape = static_shape(x)
            if mean is None or var_ is None or eps is None or shape is None or len(shape) < 3:
                return None
            axes = list(range(2, len(shape)))
            for reduce in (mean, var_):
                if not reduce.args[0].same_as(x) or not reduce.attrs.keepdims \
                        or reduce.attrs.axis is None \
                        or sorted(int(a) % len(shape) for a in reduce.attrs.axis) != axes:
                    return None
            return x, eps

        def affine(self, var):
            """``(normalized var, scale, shift)`` through an optional constant multiply and
            add after the norm (identity where absent)."""
            scale = shift = None
            add = bound_call(self, var, "relax.add")
            if add is not None and isinstance(add.args[1], GenericConst):
                var, shift = add.args[0], add.args[1].value.numpy()
            mul = bound_call(self, var, "relax.multiply")
            if mul is not None and isinstance(mul.args[1], GenericConst):
                var, scale = mul.args[0], mul.args[1].value.numpy()
            return var, scale, shift

        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = getattr(call.op, "name", "")
            found = self.group_norm(call) if name == "relax.reshape" else None
            if found is not None:
                changed.append(call)
                return found
            return self.full_rank(call) if name in ELEMENTWISE else call

        def group_norm(self, call):
            """``reshape(norm of reshape(y, (N, G, rest)) * s + b, y's shape)`` as a group
            norm of ``y`` with the per-group ``s``, ``b`` spread over each group's channels."""
            back = static_shape(call)
            inner, scale, shift = self.affine(call.args[0])
            div = bound_call(self, inner, "relax.divide")
            norm = None if div is None or back is None or len(back) < 3 else self.normalized(div)
            if norm is None:
                return None
            x, eps = norm
            grouped = bound_call(self, x, "relax.reshape")
            shape = static_shape(x)
            if grouped is None or len(shape) != 3 or static_shape(grouped.args[0]) != back \
                    or shape[0] != back[0] or back[1] % shape[1] != 0:
                return None
            groups, channels = shape[1], back[1]
            # ONNX's per-group scale and shift (ones and zeros): shape (G, 1), or a scalar
            for v in (scale, shift):
                if v is not None and v.size != 1 and not (
                        v.size == groups and v.ndim >= 2 and v.shape[-2:] == (groups, 1)):
                    return None
            dtype = str(call.ty.dtype)

            def spread(value, default):
                value = np.full(groups, default, dtype) if value is None \
                    else np.broadcast_to(value.reshape(-1), (groups,))
                return relax.const(np.repeat(value, channels // groups).astype(dtype))

            return relax.op.nn.group_norm(
                grouped.args[0], spread(scale, 1.0), spread(shift, 0.0), groups, 1,
                list(range(2, len(back))), eps)

        def full_rank(self, call):
            ranks = [len(s) if s is not None else None for s in map(static_shape, call.args)]
            # only where a layout is converted (4-D and 5-D activations): a transformer's
            # biases keep their rank, and so its tasks and their records
            if len(call.args) != 2 or None in ranks or ranks[0] == ranks[1] or max(ranks) < 4:
                return call
            low = ranks.index(min(ranks))
            const = call.args[low]
            if not isinstance(const, GenericConst) or ranks[low] == 0:
                return call
            value = const.value.numpy()
            args = list(call.args)
            args[low] = relax.const(value.reshape((1,) * (max(ranks) - value.ndim) + value.shape))
            changed.append(call)
            return relax.Call(call.op, args, call.attrs, call.ty_args)

    changed: list = []

    @tvm.transform.module_pass(opt_level=0, name="TensortuneNorms")
    def apply(mod, _ctx):
        changed.clear()
        out = mutate_functions(Rewrite(mod), mod)
        if not changed:  # a model without one comes back as it was
            return mod
        return relax.transform.DeadCodeElimination()(out)

    return apply


def decompose_group_norms():
    """A function pass: each ``group_norm`` as ``(x - mean) / sqrt(variance + eps)`` over its
    axes and its channels' group, then its scale and shift, in whatever layout it has."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class Decompose(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", "") != "relax.nn.group_norm":
                return call
            shape = static_shape(call.args[0])
            if shape is None:
                return call
            changed.append(call)
            return self.decomposed(call, shape)

        def decomposed(self, call, shape):
            attrs, emit = call.attrs, self.builder_.emit
            x, gamma, beta = call.args
            c, groups = int(attrs.channel_axis) % len(shape), int(attrs.num_groups)
            axes = [int(a) % len(shape) for a in attrs.axes]
            split = shape[:c] + [groups, shape[c] // groups] + shape[c + 1:]
            outer = [a + (a > c) for a in axes]
            xs = emit(relax.op.reshape(x, split))

            def moment(value):
                # over the norm's axes first, the channel axis kept: with channels last, a
                # reduction whose every step is a vector of contiguous channels; then over
                # each group's few channels, a tensor of C values
                per_channel = emit(relax.op.mean(value, outer, keepdims=True))
                return emit(relax.op.mean(per_channel, [c + 1], keepdims=True))

            centred = emit(relax.op.subtract(xs, moment(xs)))
            var = moment(emit(relax.op.multiply(centred, centred)))
            eps = relax.const(float(attrs.epsilon), str(call.ty.dtype))
            out = emit(relax.op.divide(centred, emit(relax.op.sqrt(emit(relax.op.add(var, eps))))))
            out = emit(relax.op.reshape(out, shape))
            along = [1] * len(shape)
            along[c] = shape[c]
            if attrs.scale:
                out = emit(relax.op.multiply(out, relax.op.reshape(gamma, along)))
            return relax.op.add(out, relax.op.reshape(beta, along)) if attrs.center else out

    changed: list = []

    @relax.transform.function_pass(opt_level=0, name="TensortuneDecomposeGroupNorms")
    def apply(func, mod, _ctx):
        changed.clear()
        out = Decompose(mod).visit_expr(func)
        return out if changed else func

    return apply
