"""Fast math: activations, softmax, exp, erf and tanh as vectorizable polynomial approximations.

TVM lowers ``exp``, ``erf`` and ``sigmoid`` (via ``exp``) to libm calls, one scalar call per
element: BERT-base's GELU took 7.6% of its time at 1.6 GFLOP/s, and a 1x1 convolution
(64 channels, 16x16) fused with its SiLU took 88 us against 20 us with a ReLU (24 us with the
rewrite below; EfficientNet-B0 3.1x ONNX Runtime's latency, then 1.05x). TVM's
``FastMathTransform`` swaps ``exp``, ``erf``, ``tanh`` and ``softmax`` for TOPI's polynomial
versions (errors around 1e-7 relative, well inside a float32 model's tolerance), which
vectorize. The activations that hide those calls are first written out so that it catches them:

- GELU as ``x / 2 * (1 + erf(x / sqrt 2))`` (or its tanh form);
- sigmoid (SiLU is ``x * sigmoid(x)`` after import) as ``1 / (1 + exp(-x))``: accurate
  relative to the result also where it is tiny, unlike ``(1 + tanh(x / 2)) / 2``;
- Mish's ``tanh(softplus(x))`` as ``n / (n + 2)`` with ``n = e (e + 2)``, ``e = exp(min(x,
  20))``: no ``log`` (libm too), and exact algebra (``tanh(log(1 + e)) = n / (n + 2)``);
- a division by a scalar constant (HardSwish's and HardSigmoid's ``/ 6``, attention's
  ``/ sqrt d``) as a multiplication by its reciprocal (within an ulp): a vector division
  takes several cycles where a depthwise 3x3 has nine FMAs per output to hide it behind.
"""
from __future__ import annotations

import math

import numpy as np

from .rewriting import float_scalar

MISH_CLAMP = 20.0  # tanh(softplus(x)) is 1.0 in float32 beyond it; e (e + 2) stays finite


def fast_math_pass():
    """Activations expanded (above), then TVM's ``FastMathTransform``; the bindings the
    expansion left unused (Mish's ``log``) removed."""
    import tvm
    from tvm import relax

    return tvm.transform.Sequential(
        [expand_activations_pass(), relax.transform.FastMathTransform(),
         relax.transform.DeadCodeElimination()], name="tensortune.FastMath")


def expand_activations_pass():
    """The rewrites above alone: layout-neutral elementwise ops, so it can also run before
    ``ConvertLayout``, which puts transposes between Mish's ``greater`` and ``where`` (its
    softplus then no longer matches here, and keeps its ``log``)."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from .rewriting import bound_call, mutate_functions

    @mutator
    class Expand(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            op = getattr(call.op, "name", None)
            if op in ("relax.nn.gelu", "relax.nn.gelu_tanh"):
                return self._gelu(call.args[0], op == "relax.nn.gelu")
            if op == "relax.sigmoid":
                return self._recip_one_plus_exp(call.args[0])
            if op == "relax.nn.silu":
                x = call.args[0]
                return relax.op.multiply(x, self.builder_.emit(self._recip_one_plus_exp(x)))
            if op == "relax.divide":
                c = float_scalar(call.args[1])
                if c is not None and c != 0 and math.isfinite(c):
                    value = call.args[1].value.numpy()
                    return relax.op.multiply(call.args[0], relax.const(
                        np.asarray(1.0 / c, value.dtype).reshape(value.shape)))
            if op == "relax.tanh":
                x = self._softplus_input(call.args[0])
                if x is not None:
                    return self._tanh_softplus(x)
            return call

        def _gelu(self, x, exact: bool):
            emit, R, c = self.builder_.emit, relax.op, _const_like(x)
            if exact:
                inner = emit(R.erf(emit(R.multiply(x, c(1 / math.sqrt(2))))))
            else:  # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
                cube = emit(R.multiply(emit(R.multiply(x, x)), x))
                arg = emit(R.add(x, emit(R.multiply(cube, c(0.044715)))))
                inner = emit(R.tanh(emit(R.multiply(arg, c(math.sqrt(2 / math.pi))))))
            return R.multiply(emit(R.multiply(x, c(0.5))), emit(R.add(inner, c(1.0))))

        def _recip_one_plus_exp(self, x):
            emit, R, c = self.builder_.emit, relax.op, _const_like(x)
            return R.divide(c(1.0), emit(R.add(emit(R.exp(emit(R.negative(x)))), c(1.0))))

        def _tanh_softplus(self, x):
            emit, R, c = self.builder_.emit, relax.op, _const_like(x)
            e = emit(R.exp(emit(R.minimum(x, c(MISH_CLAMP)))))
            n = emit(R.multiply(e, emit(R.add(e, c(2.0)))))
            return R.divide(n, emit(R.add(n, c(2.0))))

        def _softplus_input(self, var):
            """``x`` when ``var`` is PyTorch's softplus, ``where(x > 20, x, log(exp(x) + 1))``."""
            where = bound_call(self, var, "relax.where")
            if where is None:
                return None
            cond, x, soft = where.args
            greater = bound_call(self, cond, "relax.greater")
            log = bound_call(self, soft, "relax.log")
            add = bound_call(self, log.args[0], "relax.add") if log is not None else None
            if greater is None or add is None or float_scalar(greater.args[1]) != MISH_CLAMP:
                return None
            exp_var, one = add.args
            exp = bound_call(self, exp_var, "relax.exp")
            if exp is None or float_scalar(one) != 1.0 or not (greater.args[0].same_as(x)
                                                          and exp.args[0].same_as(x)):
                return None
            return x

    @tvm.transform.module_pass(opt_level=0, name="tensortune.ExpandActivations")
    def expand(mod, _ctx):
        mutator_ = Expand(mod)
        return mutate_functions(mutator_, mod)

    return expand


def _const_like(x):
    from tvm import relax

    dtype = x.ty.dtype
    return lambda v: relax.const(v, dtype)
