"""One recurrent layer (ONNX ``LSTM``, ``GRU`` with ``linear_before_reset``, ``RNN``) as one
TIR function: every step of every direction in a serial loop.

Per step, ``tt_rnn_gates`` is the recurrent product ``acc = h Rᵀ + Rb`` (a reduction over
``h``: ``space.cpu_recurrent`` vectorizes it along the gates, with the weights ``Rᵀ`` kept in
cache from step to step), ``tt_rnn_cell`` and ``tt_rnn_out`` the gate equations (reading the
input projection ``P = X Wᵀ + b``, computed for all steps by a matrix product before the
call), and ``tt_rnn_state`` copies the new state for the next step. The activations are polynomial
(TOPI's ``fast_exp`` and ``fast_tanh``), so the cell vectorizes: TVM's ``exp`` is a scalar
libm call, three times slower than the whole product here.

The step index ``s`` is a spatial block iterator that no write depends on, so the schedule's
primitives accept the blocks; the template never splits, reorders or parallelizes it.
"""
from __future__ import annotations

import dataclasses

from ..workload.primfunc import INPUT_SCALE

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
# block names ``space.cpu_recurrent`` finds the function by
INIT, GATES_BLOCK, CELL, OUT, STATE = ("tt_rnn_init", "tt_rnn_gates", "tt_rnn_cell", "tt_rnn_out",
                                      "tt_rnn_state")


@dataclasses.dataclass(frozen=True)
class Recurrence:
    """The shape and equations of one recurrent layer."""

    kind: str  # LSTM, GRU (linear_before_reset=1 only), RNN
    steps: int
    directions: int  # 1 or 2
    batch: int
    hidden: int
    reverse: bool  # a one-direction layer run backwards
    activations: tuple[str, ...]  # ONNX's f, g(, h): Sigmoid, Tanh, Relu
    peepholes: bool = False  # LSTM only
    final_cell: bool = False  # LSTM: Y gets one more row, the last cell state

    @property
    def gates(self) -> int:
        return GATES[self.kind]

    @property
    def rows(self) -> int:
        return self.steps + int(self.final_cell)


def fast_exp(x):
    """TOPI's ``fast_exp`` on a float32 ``PrimExpr``: 2^n times a degree-7 polynomial."""
    from tvm import tirx

    f32 = lambda v: tirx.const(v, "float32")  # noqa: E731
    x = tirx.max(tirx.min(x, f32(88.3762626647950)), f32(-88.3762626647949))
    n = tirx.floor(x * f32(1.44269504088896341) + f32(0.5))
    r = x - n * f32(0.6931471805599453)
    p = f32(1.9875691500e-4)
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
              5.0000001201e-1):
        p = p * r + f32(c)
    scale = tirx.reinterpret("float32", tirx.shift_left(
        tirx.Cast("int32", n + f32(127.0)), tirx.const(23, "int32")))
    return scale * (p * r * r + r + f32(1.0))


def fast_tanh(x):
    """TOPI's ``fast_tanh``: a rational polynomial on [-9, 9] (Eigen's)."""
    from tvm import tirx

    f32 = lambda v: tirx.const(v, "float32")  # noqa: E731
    x = tirx.max(tirx.min(x, f32(9.0)), f32(-9.0))
    x2 = x * x
    p = f32(-2.76076847742355e-16)
    for c in (2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
              1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03):
        p = x2 * p + f32(c)
    q = f32(1.19825839466702e-06)
    for c in (1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03):
        q = x2 * q + f32(c)
    return x * p / q


def activation(name: str, x):
    from tvm import tirx

    if name == "Sigmoid":
        one = tirx.const(1.0, "float32")
        return one / (one + fast_exp(-x))
    if name == "Tanh":
        return fast_tanh(x)
    if name == "Relu":
        return tirx.max(x, tirx.const(0.0, "float32"))
    raise ValueError(f"no activation {name!r} in a fused recurrent layer")


def recurrence_func(r: Recurrence):
    """The layer's ``PrimFunc``: ``(P[S, B, D, G*H], Rt[D, H, G*H], Rb[D, G*H], H0[D, B, H],
    C0[D, B, H], Peep[D, 3, H], Y[S(+1), D, B, H])`` (``C0`` and ``Peep`` read by an LSTM
    only; zeros when it has none). ``P`` is the input projection of every step and direction
    (one matrix product's output), ``Rt`` is ``R`` transposed and ``Rb`` the bias added to
    ``h Rᵀ`` (GRU's candidate bias, which ``r`` gates; zero otherwise). ``Y`` is ONNX's ``Y``
    (layout 0), with the last cell state as one more row when ``final_cell``.

    No activation's argument holds another activation: TVM's expressions are trees, so a
    polynomial ``tanh`` of an expression with activations in it would copy them twenty times
    (LLVM merges the copies, but TVM's FLOP count would not). What one activation feeds to
    another goes through the buffer ``cn``: an LSTM's new cell state, a GRU's candidate input.
    """
    from tvm.script import tirx as T

    D, S, B, H, G = r.directions, r.steps, r.batch, r.hidden, r.gates
    GH, ROWS = G * H, r.rows
    kind, peep = r.kind, r.peepholes
    # measured with random inputs: recurrent weights of 1 / H keep the steps contractive, so
    # the tuner's check against the reference does not see rounding grown chaotic
    scales = [1.0, 1.0 / H, 1.0, 1.0, 1.0, 1.0]
    acts = list(r.activations) + [r.activations[-1]] * 2
    f = lambda x: activation(acts[0], x)  # noqa: E731
    g = lambda x: activation(acts[1], x)  # noqa: E731
    h_act = lambda x: activation(acts[2] if kind == "LSTM" else acts[1], x)  # noqa: E731

    def step(d, s):
        """The time index of step ``s`` of direction ``d`` (the second one runs backwards)."""
        if r.reverse:
            return S - 1 - s
        return s + d * (S - 1 - 2 * s) if D == 2 else s

    def pre(P, acc, d, s, b, k, i):
        """Gate ``k``'s argument: the projection of the step plus the recurrent product."""
        return P[step(d, s), b, d, k * H + i] + acc[d, b, k * H + i]

    def lstm_cell(P, acc, c, peep_w, d, s, b, i):
        # ONNX's gate order: input, output, forget, cell
        gi, gf = pre(P, acc, d, s, b, 0, i), pre(P, acc, d, s, b, 2, i)
        if peep:
            gi, gf = gi + peep_w[d, 0, i] * c[d, b, i], gf + peep_w[d, 2, i] * c[d, b, i]
        return f(gf) * c[d, b, i] + f(gi) * g(pre(P, acc, d, s, b, 3, i))

    def lstm_hidden(P, acc, cn, peep_w, d, s, b, i):
        go = pre(P, acc, d, s, b, 1, i)
        if peep:
            go = go + peep_w[d, 1, i] * cn[d, b, i]
        return f(go) * h_act(cn[d, b, i])

    def cell_input(P, acc, d, s, b, i):
        """RNN: the hidden state's argument; GRU: the candidate's, ``r`` gating ``h Rhᵀ +
        Rbh`` (ONNX's gate order: update, reset, hidden)."""
        if kind == "RNN":
            return pre(P, acc, d, s, b, 0, i)
        return P[step(d, s), b, d, 2 * H + i] + f(pre(P, acc, d, s, b, 1, i)) * acc[d, b, 2 * H + i]

    def cell_hidden(P, acc, cn, h, d, s, b, i):
        if kind == "RNN":
            return f(cn[d, b, i])
        return g(cn[d, b, i]) * (1.0 - f(pre(P, acc, d, s, b, 0, i))) + \
            f(pre(P, acc, d, s, b, 0, i)) * h[d, b, i]

    lstm = kind == "LSTM"

    @T.prim_func(s_tir=True)
    def layer(P: T.Buffer((S, B, D, GH), "float32"), Rt: T.Buffer((D, H, GH), "float32"),
              Rb: T.Buffer((D, GH), "float32"), H0: T.Buffer((D, B, H), "float32"),
              C0: T.Buffer((D, B, H), "float32"), Peep: T.Buffer((D, 3, H), "float32"),
              Y: T.Buffer((ROWS, D, B, H), "float32")):
        T.func_attr({"tirx.noalias": True, INPUT_SCALE: scales})
        h = T.sblock_alloc_buffer((D, B, H))
        c = T.sblock_alloc_buffer((D, B, H))
        cn = T.sblock_alloc_buffer((D, B, H))
        acc = T.sblock_alloc_buffer((D, B, GH))
        for d, b, i in T.grid(D, B, H):
            with T.sblock(INIT):
                vd, vb, vi = T.axis.remap("SSS", [d, b, i])
                h[vd, vb, vi] = H0[vd, vb, vi]
                if lstm:
                    c[vd, vb, vi] = C0[vd, vb, vi]
        for d, s in T.grid(D, S):
            for b, j, k in T.grid(B, GH, H):
                with T.sblock(GATES_BLOCK):
                    vd, vs, vb, vj, vk = T.axis.remap("SSSSR", [d, s, b, j, k])
                    with T.init():
                        acc[vd, vb, vj] = Rb[vd, vj]
                    acc[vd, vb, vj] = acc[vd, vb, vj] + h[vd, vb, vk] * Rt[vd, vk, vj]
            for b, i in T.grid(B, H):
                with T.sblock(CELL):
                    vd, vs, vb, vi = T.axis.remap("SSSS", [d, s, b, i])
                    if lstm:
                        cn[vd, vb, vi] = lstm_cell(P, acc, c, Peep, vd, vs, vb, vi)
                    else:
                        cn[vd, vb, vi] = cell_input(P, acc, vd, vs, vb, vi)
            for b, i in T.grid(B, H):
                with T.sblock(OUT):
                    vd, vs, vb, vi = T.axis.remap("SSSS", [d, s, b, i])
                    if lstm:
                        Y[step(vd, vs), vd, vb, vi] = lstm_hidden(P, acc, cn, Peep, vd, vs, vb,
                                                                  vi)
                    else:
                        Y[step(vd, vs), vd, vb, vi] = cell_hidden(P, acc, cn, h, vd, vs, vb, vi)
                    if ROWS > S:
                        Y[S, vd, vb, vi] = cn[vd, vb, vi]
            for b, i in T.grid(B, H):
                with T.sblock(STATE):
                    vd, vs, vb, vi = T.axis.remap("SSSS", [d, s, b, i])
                    if lstm:
                        c[vd, vb, vi] = cn[vd, vb, vi]
                    h[vd, vb, vi] = Y[step(vd, vs), vd, vb, vi]
    return layer.with_attr("global_symbol", f"tt_{kind.lower()}")
