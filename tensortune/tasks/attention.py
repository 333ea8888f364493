"""Fused attention: ``softmax(mask(scale * Q Kᵀ)) V`` as one function, per row block of Q.

Imported, a transformer's attention is five or six kernels: copies that cut Q, K and V out of
the projection (and transpose K), ``Q Kᵀ`` writing the scores, the scale, softmax reading and
writing them twice, and ``· V``. DeiT-S on Zen 4 spent 5.9 ms of 46 in them: ``Q Kᵀ`` at 60%
of the FMA peak (its 197 x 197 scores go out to memory), 0.9 ms in softmax and 0.8 ms in the
copies. OpenVINO and ONNX Runtime run the attention as one node.

The rewrite matches ``matmul(softmax(x, axis=-1), V)`` where ``x`` is ``matmul(A, B)`` followed
by any of a scalar scale, a ``where`` (a causal mask) and an added tensor (an attention mask),
each value used once. ``A``, ``B`` and ``V`` are followed back through the permutations,
slices, reshapes and scalar scales that made them, to the tensors they were cut from (the
projection's output), and the function reads those directly (``attention``):

- ``tt_attn_kt``: ``Bᵀ`` of one head copied into a panel padded to whole vectors of columns;
- ``tt_attn_scores``: a row block of ``A B``, with the scale and mask applied as it is read;
- ``tt_attn_max``, ``tt_attn_exp``, ``tt_attn_sum``: softmax of the row block, unnormalized;
- ``tt_attn_out``: the row block of ``exp · V``, then ``tt_attn_norm`` divides by the sums.

The scores and probabilities of a row block stay in L1 (``space.cpu_attention`` schedules it).
Rows are padded to a multiple of ``ROW_PAD`` (197 tokens computed as 200) and columns to a
multiple of ``COLUMN_PAD``; the padded columns are masked out of the softmax.
"""
from __future__ import annotations

from ..errors import strict
from .rewriting import (float_scalar, mutate_functions, single_use_call, static_shape,
                        use_counts)

REWRITE = "attention fusion"
# block names the template looks for (``space.cpu_attention``)
KT, SCORES, MAX, EXP, SUM, OUT, NORM = ("tt_attn_kt", "tt_attn_scores", "tt_attn_max",
                                        "tt_attn_exp", "tt_attn_sum", "tt_attn_out",
                                        "tt_attn_norm")
ROW_PAD = 8  # rows of a padded row block: 197 -> 200, whose divisors give the row blocks
COLUMN_PAD = 16  # one AVX-512 vector of float32 (two AVX2 vectors)
CHAIN_DEPTH = 8  # view-like ops followed back from Q, K and V
LOWEST = -3.4028234663852886e38  # the float32 fill of a masked score


def _pad(n: int, k: int) -> int:
    return -(-n // k) * k


def apply_chain(x, chain):
    """TE: ``x`` through ``chain``'s steps (``_chain``): ``("permute", axes)``,
    ``("slice", axes, begin, end)``, ``("reshape", shape)``, ``("scale", c)``."""
    from tvm import te, topi

    for step in chain:
        kind = step[0]
        if kind == "permute":
            x = topi.transpose(x, list(step[1]))
        elif kind == "slice":
            _, axes, begin, end = step
            x = topi.strided_slice(x, list(begin), list(end), [1] * len(axes), list(axes))
        elif kind == "reshape":
            x = topi.reshape(x, list(step[1]))
        elif kind == "scale":
            x = topi.multiply(x, te.const(step[1], x.dtype))
        else:  # a step that ``_chain`` does not produce
            raise ValueError(f"unknown chain step {kind!r}")
    return x


def attention(sources, extras, chains, steps, fast: bool = True, out_axes=None):
    """TE of the fused attention (module docstring). ``sources`` are the tensors ``A``, ``B``,
    ``V`` are cut from (``chains[i] = (source index, steps)``), ``extras`` the masks that
    ``steps`` refer to: ``("scale", c)``, ``("where", extra, fill)``, ``("add", extra)``;
    ``out_axes``: the result permuted so (``permute_dims``' axes; None: as computed)."""
    from tvm import te, tirx, topi

    a, b, v = (apply_chain(sources[i], chain) for i, chain in chains)
    *batch, n, d = (int(s) for s in a.shape)
    m, e = int(b.shape[-1]), int(v.shape[-1])
    np_, mp = _pad(n, ROW_PAD), _pad(m, COLUMN_PAD)
    dtype = a.dtype
    nb = len(batch)

    def low(x):
        return tirx.min(x, n - 1) if np_ != n else x

    kt = te.compute((*batch, d, mp), lambda *i: tirx.if_then_else(
        i[-1] < m, b[(*i[:-1], tirx.min(i[-1], m - 1))], tirx.const(0, dtype)), name=KT)
    rd = te.reduce_axis((0, d), name="rd")
    scores = te.compute((*batch, np_, mp), lambda *i: te.sum(
        a[(*i[:nb], low(i[nb]), rd)] * kt[(*i[:nb], rd, i[-1])], axis=rd), name=SCORES)

    def broadcast(t, idx):
        offset = len(idx) - len(t.shape)
        return t[tuple(0 if int(s) == 1 else idx[offset + k] for k, s in enumerate(t.shape))]

    def logit(*i):
        row, col = low(i[nb]), tirx.min(i[-1], m - 1)
        idx = (*i[:nb], row, col)
        x = scores[i]
        for step in steps:
            if step[0] == "scale":
                x = x * tirx.const(step[1], dtype)
            elif step[0] == "where":
                x = tirx.Select(broadcast(extras[step[1]], idx), x, tirx.const(step[2], dtype))
            elif step[0] == "add":
                x = x + broadcast(extras[step[1]], idx).astype(dtype)
        return x

    rm = te.reduce_axis((0, mp), name="rm")
    top = te.compute((*batch, np_), lambda *i: te.max(tirx.Select(
        rm < m, logit(*i, rm), tirx.const(LOWEST, dtype)), axis=rm), name=MAX)
    shifted = te.compute((*batch, np_, mp), lambda *i: logit(*i) - top[i[:-1]],
                         name="tt_attn_shift")
    exp = topi.fast_exp(shifted) if fast else topi.exp(shifted)
    probs = te.compute((*batch, np_, mp), lambda *i: tirx.if_then_else(
        i[-1] < m, exp[i], tirx.const(0, dtype)), name=EXP)
    rs = te.reduce_axis((0, mp), name="rs")
    total = te.compute((*batch, np_), lambda *i: te.sum(probs[(*i, rs)], axis=rs), name=SUM)
    rv = te.reduce_axis((0, m), name="rv")
    out = te.compute((*batch, np_, e), lambda *i: te.sum(
        probs[(*i[:-1], rv)] * v[(*i[:nb], rv, i[-1])], axis=rv), name=OUT)
    shape = (*batch, n, e)
    axes = tuple(out_axes) if out_axes is not None else tuple(range(len(shape)))
    where = [axes.index(k) for k in range(len(shape))]  # output axis of each computed axis

    def normalized(*o):
        i = tuple(o[where[k]] for k in range(len(shape)))
        return out[i] / total[i[:-1]]

    return te.compute(tuple(shape[a] for a in axes), normalized, name=NORM)


def _ints(tup) -> list[int]:
    return [int(x.value) for x in tup.fields]


def attention_pass(fast: bool = True):
    """A module pass fusing each matched attention (module docstring); ``fast``: its exp as
    TOPI's polynomial (``GraphOptions.fast_math``)."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        def __init__(self, mod, uses, failed: list):
            super().__init__(mod)
            self.uses = uses
            self.failed = failed
            self.fused: list = []  # (the fused call, its match)

        def visit_call_(self, call):
            call = super().visit_call_(call)
            op = getattr(call.op, "name", "")
            if op == "relax.permute_dims":
                return self._permuted(call)
            if op != "relax.matmul":
                return call
            try:
                match = self._match(call)
            except (TypeError, ValueError, AttributeError):  # an unusual graph: left as it is
                if strict():
                    raise
                match = None
            if match is None:
                return call
            try:
                fused = self.builder_.call_te(attention, *match, fast,
                                              primfunc_name_hint="attention")
            except Exception as err:  # that attention stays as imported; the others go on
                if strict():
                    raise
                self.failed.append((call, err))
                return call
            self.fused.append((fused, match))
            return fused

        def _permuted(self, call):
            """The attention whose result only this permutation reads, writing it permuted
            (heads back between tokens and features: one copy less)."""
            var = call.args[0]
            value = self.lookup_binding(var) if isinstance(var, relax.Var) else None
            # the call itself, not its function: equal attentions share one PrimFunc
            match = next((m for fused, m in self.fused if fused.same_as(value)), None)
            if match is None or self.uses.get(var, 0) != 1:
                return call
            rank = len(var.ty.shape)
            axes = (tuple(int(a) for a in call.attrs.axes) if call.attrs.axes is not None
                    else tuple(reversed(range(rank))))
            try:
                return self.builder_.call_te(attention, *match, fast, axes,
                                             primfunc_name_hint="attention")
            except Exception:  # the permutation stays a copy of its own
                if strict():
                    raise
                return call

        def _bound(self, var, *ops):
            return single_use_call(self, self.uses, var, *ops)

        def _match(self, call):
            probs, v = call.args
            softmax = self._bound(probs, "relax.nn.softmax")
            if softmax is None:
                return None
            shape = static_shape(softmax)
            if shape is None or len(shape) < 3 or int(softmax.attrs.axis) % len(shape) != len(shape) - 1:
                return None
            x, extras, steps = softmax.args[0], [], []
            for _ in range(4):  # scale, mask and added mask, in any order
                step = self._bound(x, "relax.multiply", "relax.divide", "relax.where", "relax.add")
                if step is None:
                    break
                op = step.op.name
                if op in ("relax.multiply", "relax.divide"):
                    c, other = float_scalar(step.args[1]), step.args[0]
                    if c is None and op == "relax.multiply":
                        c, other = float_scalar(step.args[0]), step.args[1]
                    if c is None or (op == "relax.divide" and c == 0):
                        return None
                    steps.append(("scale", 1.0 / c if op == "relax.divide" else c))
                    x = other
                elif op == "relax.where":
                    fill = float_scalar(step.args[2])
                    if fill is None or not _broadcasts(step.args[0], shape):
                        return None
                    steps.append(("where", len(extras), fill))
                    extras.append(step.args[0])
                    x = step.args[1]
                else:
                    lhs, rhs = step.args
                    if static_shape(lhs) != shape:
                        lhs, rhs = rhs, lhs
                    if static_shape(lhs) != shape or not _broadcasts(rhs, shape):
                        return None
                    steps.append(("add", len(extras)))
                    extras.append(rhs)
                    x = lhs
            scores = self._bound(x, "relax.matmul")
            if scores is None:
                return None
            a, b = scores.args
            sa, sb, sv = static_shape(a), static_shape(b), static_shape(v)
            if (sa is None or sb is None or sv is None or not len(sa) == len(sb) == len(sv)
                    or sa[:-2] != sb[:-2] or sa[:-2] != sv[:-2] or sa[-1] != sb[-2]
                    or sv[-2] != sb[-1] or any(t.ty.dtype != "float32" for t in (a, b, v))):
                return None
            sources, chains = [], []
            for operand in (a, b, v):
                source, chain = self._chain(operand)
                index = next((k for k, s in enumerate(sources) if s.same_as(source)), None)
                if index is None:
                    index = len(sources)
                    sources.append(source)
                chains.append((index, tuple(chain)))
            return sources, extras, tuple(chains), tuple(steps[::-1])

        def _chain(self, var):
            """``(source, steps)``: the tensor ``var`` is a view-like copy of, and the steps
            (``apply_chain``) that make ``var`` from it."""
            steps = []
            for _ in range(CHAIN_DEPTH):
                if not isinstance(var, relax.Var):
                    break
                value = self.lookup_binding(var)
                if not isinstance(value, relax.Call):
                    break
                op = getattr(value.op, "name", "")
                src = value.args[0]
                in_shape, out_shape = static_shape(src), static_shape(value)
                if in_shape is None or out_shape is None or src.ty.dtype != "float32":
                    break
                if op == "relax.permute_dims":
                    axes = value.attrs.axes
                    steps.append(("permute", tuple(int(a) for a in axes) if axes is not None
                                  else tuple(reversed(range(len(in_shape))))))
                elif op in ("relax.reshape", "relax.squeeze", "relax.expand_dims"):
                    steps.append(("reshape", tuple(out_shape)))
                elif op == "relax.strided_slice":
                    if len(value.args) > 4 and any(s != 1 for s in _ints(value.args[4])):
                        break
                    axes = [a % len(in_shape) for a in _ints(value.args[1])]
                    begin = [b % in_shape[a] if b < 0 else min(b, in_shape[a])
                             for a, b in zip(axes, _ints(value.args[2]))]
                    end = [begin[k] + out_shape[a] for k, a in enumerate(axes)]
                    steps.append(("slice", tuple(axes), tuple(begin), tuple(end)))
                elif op == "relax.multiply" and float_scalar(value.args[1]) is not None:
                    steps.append(("scale", float_scalar(value.args[1])))
                else:
                    break
                var = src
            return var, steps[::-1]

    @tvm.transform.module_pass(opt_level=0, name="TensortuneAttention")
    def apply(mod, _ctx):
        failed: list = []
        out = mutate_functions(Rewriter(mod, use_counts(mod), failed), mod)
        if failed:
            from .winograd import warn_skipped

            warn_skipped(REWRITE, [str(c.ty) for c, _ in failed], failed[0][1])
        return relax.transform.DeadCodeElimination()(out)

    return apply


def _broadcasts(expr, shape: list[int]) -> bool:
    """Whether ``expr`` has a static shape that broadcasts to ``shape``."""
    own = static_shape(expr)
    if own is None or len(own) > len(shape):
        return False
    return all(o in (1, s) for o, s in zip(own, shape[len(shape) - len(own):]))
