"""Recurrent layers imported as one fused function each (``recurrence_tir``), not unrolled.

Unrolled (``onnx_rnn``), every step of an LSTM is two or three kernels and a few VM calls;
a 100-step tagger spent 3.9 ms in 198 calls of ``h Rᵀ`` at 6% of the FMA peak, where ONNX
Runtime runs the layer as one kernel. Fused, the layer is one call: a serial loop of steps
whose recurrent product streams ``Rᵀ`` from cache.

TVM's converter has no hook for an operator of its own, so the layer is cut out of the graph
around the converter: ``onnx_rnn.lower_recurrent`` writes the input projection (a ``MatMul``
over all steps) and makes the layer's outputs graph inputs and the values it reads (the
projection, initial states that are not constants) graph outputs. After import,
``stitch_layers`` puts the layer back: a ``call_tir`` of its function where its outputs are
first used, the extra inputs and outputs dropped.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .recurrence_tir import Recurrence, recurrence_func

FUSED_ACTIVATIONS = frozenset({"Sigmoid", "Tanh", "Relu"})


def fusable(kind: str, attrs: dict, activations: list, dtype) -> bool:
    """Whether one fused function computes the node: float32, one set of activations for both
    directions, and GRU in ``linear_before_reset`` form (PyTorch's; the other form needs a
    second product per step, after the reset gate, and is unrolled)."""
    if np.dtype(dtype) != np.float32:
        return False
    if kind == "GRU" and not int(attrs.get("linear_before_reset", 0)):
        return False
    half = len(activations) // 2
    return activations[:half] == activations[half:] and set(activations) <= FUSED_ACTIVATIONS


def _ordered(body, pending):
    """``body`` (one dataflow block) with its bindings reordered so that a binding using a cut
    layer's output comes after every value the layer reads: the converter emits some values
    (reshapes, transposes of inputs) later than their place in the graph."""
    import heapq

    from tvm import relax

    if len(body.blocks) != 1 or not isinstance(body.blocks[0], relax.DataflowBlock):
        raise ValueError("main's body is not one dataflow block")
    bindings = list(body.blocks[0].bindings)
    index = {b.var: i for i, b in enumerate(bindings)}
    needs = {p: reads for _, params, reads in pending for p in params}
    deps = []
    for binding in bindings:
        here = set()
        for var in relax.analysis.free_vars(binding.value):
            here |= {index[r] for r in needs.get(var, ()) if r in index}
            if var in index:
                here.add(index[var])
        deps.append(here)
    users = [[] for _ in bindings]
    for i, here in enumerate(deps):
        for j in here:
            users[j].append(i)
    waiting = [len(d) for d in deps]
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:  # the original order wherever the dependencies allow it
        i = heapq.heappop(ready)
        order.append(bindings[i])
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    if len(order) != len(bindings):
        raise ValueError("a cut layer's outputs feed what it reads")
    return relax.SeqExpr([relax.DataflowBlock(order)], body.body)


@dataclasses.dataclass
class FusedLayer:
    """One recurrent node cut out of the graph: what it reads (names of graph values, or
    constant arrays) and the names of its outputs ``Y``, ``Y_h``, ``Y_c`` ("" when unused)."""

    recurrence: Recurrence
    projection: str  # [S, B, D, G*H]
    h0: str | np.ndarray  # [D, B, H]
    c0: str | np.ndarray  # [D, B, H]; zeros but for an LSTM's given initial cell state
    rt: np.ndarray  # [D, H, G*H]
    rb: np.ndarray  # [D, G*H]
    peep: np.ndarray  # [D, 3, H]; zeros but for an LSTM's peepholes
    outputs: tuple[str, str, str]

    def output_shapes(self) -> list[list[int]]:
        r = self.recurrence
        return [[r.steps, r.directions, r.batch, r.hidden]] + [[r.directions, r.batch,
                                                               r.hidden]] * 2

    def read_names(self) -> list[str]:
        """The graph values it reads, in the order they are made graph outputs."""
        return [self.projection] + [v for v in (self.h0, self.c0) if isinstance(v, str)]

    def cut_inputs(self) -> list:
        from onnx import TensorProto, helper

        return [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
                for name, shape in zip(self.outputs, self.output_shapes()) if name]

    def cut_outputs(self) -> list:
        from onnx import TensorProto, helper

        r = self.recurrence
        shapes = [[r.steps, r.batch, r.directions, r.gates * r.hidden]] + [
            [r.directions, r.batch, r.hidden]] * 2
        return [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
                for n, shape in zip(self.read_names(), shapes)]


def cut_shapes(layers) -> dict[str, list[int]]:
    """The shapes of the graph inputs the cut layers' outputs became."""
    return {name: shape for layer in layers
            for name, shape in zip(layer.outputs, layer.output_shapes()) if name}


def stitch_layers(mod, layers, kept_inputs: int, kept_outputs: int):
    """``mod`` (imported from ``lower_recurrent``'s model) with each layer computed by its
    fused function where its outputs are first used; ``main`` gets back its first
    ``kept_inputs`` parameters and ``kept_outputs`` outputs."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    main_gv = mod.get_global_var("main")
    main = mod[main_gv]
    out_var = main.body.body
    out_binding = next((b for block in main.body.blocks for b in block.bindings
                        if b.var.same_as(out_var)), None)
    if out_binding is None or not isinstance(out_binding.value, relax.Tuple):
        raise ValueError("main's outputs are not one tuple bound in its body")
    # the cut layers' outputs are the last parameters, the values they read the last outputs
    cut, extra = list(main.params)[kept_inputs:], list(out_binding.value.fields)[kept_outputs:]
    pending = []  # (layer, its outputs' parameters, the expressions of what it reads)
    for layer in layers:
        count, reads = sum(1 for n in layer.outputs if n), len(layer.read_names())
        pending.append((layer, cut[:count], extra[:reads]))
        cut, extra = cut[count:], extra[reads:]
    if cut or extra:
        raise ValueError("the cut layers do not account for main's extra inputs and outputs")

    @mutator
    class Stitch(PyExprMutator):
        def visit_var_binding_(self, binding):
            used = relax.analysis.free_vars(binding.value)
            for entry in list(pending):
                if any(p.same_as(u) for p in entry[1] for u in used):
                    pending.remove(entry)
                    self.emit_layer(*entry)
            if binding.var.same_as(out_var):
                fields = list(binding.value.fields)[:kept_outputs]
                value = fields[0] if kept_outputs == 1 else relax.Tuple(fields)
                self.set_var_remap(binding.var,
                                   self.builder_.emit_output(self.visit_expr(value)))
                return
            super().visit_var_binding_(binding)

        def emit_layer(self, layer, outs, read_exprs):
            r, emit = layer.recurrence, self.builder_.emit
            names = layer.read_names()

            def value(v):
                if isinstance(v, np.ndarray):
                    return relax.const(v)
                return self.visit_expr(read_exprs[names.index(v)])

            args = [value(layer.projection), relax.const(layer.rt), relax.const(layer.rb),
                    value(layer.h0), value(layer.c0), relax.const(layer.peep)]
            gv = self.builder_.add_func(recurrence_func(r), f"tt_{r.kind.lower()}")
            full = emit(relax.call_tir(gv, args, relax.TensorType(
                (r.rows, r.directions, r.batch, r.hidden), "float32")))
            results = []
            if layer.outputs[0]:
                results.append(full if r.rows == r.steps else emit(
                    relax.op.strided_slice(full, [0], [0], [r.steps])))
            if layer.outputs[1]:  # the last step of each direction: row S-1, or 0 backwards
                rows = [0 if (r.reverse or d == 1) else r.steps - 1 for d in range(r.directions)]
                parts = [emit(relax.op.strided_slice(full, [0, 1], [t, d], [t + 1, d + 1]))
                         for d, t in enumerate(rows)]
                last = parts[0] if len(parts) == 1 else emit(relax.op.concat(parts, axis=1))
                results.append(emit(relax.op.reshape(last, (r.directions, r.batch, r.hidden))))
            if layer.outputs[2]:
                results.append(emit(relax.op.reshape(
                    emit(relax.op.strided_slice(full, [0], [r.steps], [r.steps + 1])),
                    (r.directions, r.batch, r.hidden))))
            for param, result in zip(outs, results):
                self.set_var_remap(param, result)

    stitcher = Stitch(mod)
    body = stitcher.visit_expr(_ordered(main.body, pending))
    # a layer left pending has outputs nothing uses: it is dropped, like any dead value
    func = relax.Function(list(main.params)[:kept_inputs], body, is_pure=main.is_pure,
                          attrs=main.attrs)
    func = func.with_attr("num_input", kept_inputs)
    stitcher.builder_.update_func(main_gv, func)
    return relax.transform.DeadCodeElimination()(stitcher.builder_.get())
