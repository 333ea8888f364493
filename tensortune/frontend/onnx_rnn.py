"""ONNX's recurrent operators (``LSTM``, ``GRU``, ``RNN``) rewritten before import: fused into
one function per layer where it can be (``lower_recurrent``, ``onnx_recurrence``), else unrolled
over their static sequence into operators TVM's converter has (described here).

TVM 0.27's ONNX converter has no recurrent operator, so a speech, keyword-spotting, OCR or
time-series model with an ``nn.LSTM`` or ``nn.GRU`` could not be imported at all. With static
input shapes the sequence length is known, and each step is a handful of plain operators:

- the input projection of every step at once, ``X Wᵀ + b`` (one ``MatMul`` over the sequence,
  the bulk of the work);
- per step, the recurrent product ``h Rᵀ`` and the gates (``Split`` into steps and gates,
  ``Sigmoid``, ``Tanh``, ``Mul``, ``Add``), in ONNX's equations and gate orders (LSTM ``iofc``
  with optional peepholes, GRU ``zrh`` with either ``linear_before_reset``);
- the outputs ``Y``, ``Y_h`` and ``Y_c`` assembled with ``Concat`` in either ``layout``.

Only operators whose form is the same in every opset are written (``MatMul``, ``Reshape``,
``Concat``, ``Transpose``, elementwise), and ``Split`` in its opset's form, so the result
imports under the model's own opset. (Not ``Gather``: the converter guards each index against
negative values with a chain of shape operators that constant folding then compiles, six
kernels per index: an LSTM of 400 steps took six minutes to import.) Equal steps become equal functions, so tuning sees one task per shape, not one per
step. What has no such form is refused with a ``ModelImportError`` naming it: ``clip``,
``input_forget``, activations other than ``Sigmoid``, ``Tanh`` and ``Relu``, per-example
``sequence_lens`` shorter than the sequence, and sequences longer than ``MAX_STEPS``.
"""
from __future__ import annotations

import numpy as np

from .model import ModelImportError
from .onnx_recurrence import FusedLayer, fusable
from .recurrence_tir import Recurrence

RECURRENT = frozenset({"LSTM", "GRU", "RNN"})
MAX_STEPS = 2048  # steps x directions of one node: the unrolled graph grows with them
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"],
                       "RNN": ["Tanh"]}
ACTIVATIONS = frozenset({"Sigmoid", "Tanh", "Relu"})


def has_recurrent(model) -> bool:
    return any(node.op_type in RECURRENT and node.domain in ("", "ai.onnx")
               for node in model.graph.node)


def unroll_recurrent(model):
    """A copy of ``model`` (its input shapes static: ``fold_shape_arithmetic`` sets them)
    with every ``LSTM``, ``GRU`` and ``RNN`` of its main graph unrolled; ``model`` itself when
    it has none."""
    return _rewrite(model, fuse=False)[0]


def lower_recurrent(model):
    """``(model, layers)``: ``model`` with each recurrent node that one fused function computes
    (``onnx_recurrence``) cut out, the rest unrolled. A cut layer's outputs become graph inputs
    and the values it reads graph outputs; ``onnx_recurrence.stitch_layers`` joins the two in
    the imported module. ``(model, [])`` when it has no recurrent node."""
    return _rewrite(model, fuse=True)


def _rewrite(model, fuse: bool):
    import onnx
    from onnx import numpy_helper, shape_inference

    if not has_recurrent(model):
        return model, []
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception as err:
        raise ModelImportError(f"cannot infer the shapes a recurrent operator needs: {err}") \
            from err
    shapes = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input):
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = [d.dim_value for d in dims]
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            weights[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    nodes, initializers, layers = [], [], []
    for index, node in enumerate(model.graph.node):
        if node.op_type not in RECURRENT or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        unrolled = _Unroller(node, index, shapes, weights, opset, fuse)
        nodes.extend(unrolled.nodes)
        initializers.extend(unrolled.initializers)
        if unrolled.layer is not None:
            layers.append(unrolled.layer)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(initializers)
    for layer in layers:
        model.graph.input.extend(layer.cut_inputs())
        model.graph.output.extend(layer.cut_outputs())
    return model, layers


class _Unroller:
    """The nodes and constants computing one recurrent node (ONNX's operator definitions)."""

    def __init__(self, node, index: int, shapes: dict, weights: dict, opset: int,
                 fuse: bool = False):
        from onnx import helper

        self.node, self.kind, self.opset, self.layer = node, node.op_type, opset, None
        self.prefix = f"tt_{self.kind.lower()}{index}_"
        self.nodes, self.initializers, self.count, self.small = [], [], 0, {}
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self.check(attrs)
        inputs = list(node.input) + [""] * (8 - len(node.input))
        x, w, r, b, lens, h0 = inputs[:6]
        if x not in shapes:
            raise self.error(f"its input {x!r} has no static shape")
        for name, what in ((w, "W"), (r, "R")):
            if name not in weights:
                raise self.error(f"its {what} ({name!r}) is not a constant")
        layout = int(attrs.get("layout", 0))
        steps, batch = (shapes[x][0], shapes[x][1]) if layout == 0 else (shapes[x][1], shapes[x][0])
        directions = 2 if attrs.get("direction", b"forward") in (b"bidirectional",
                                                                  "bidirectional") else 1
        if steps * directions > MAX_STEPS:
            raise self.error(f"{steps} steps x {directions} direction(s) is over {MAX_STEPS}")
        if lens and not (lens in weights and np.all(weights[lens] == steps)):
            raise self.error("sequence_lens not known to be the whole sequence for every "
                             "example (a padded batch)")
        if self.kind == "LSTM" and inputs[7] and inputs[7] not in weights:
            raise self.error(f"its peepholes ({inputs[7]!r}) are not a constant")
        hidden = int(weights[r].shape[-1])
        gates = GATES[self.kind]
        bias = weights[b] if b in weights else (None if b else
                                                np.zeros((directions, 2 * gates * hidden),
                                                         weights[w].dtype))
        if bias is None:
            raise self.error(f"its bias ({b!r}) is not a constant")
        # time-major input for every layout: one projection of every step below
        xs = x if layout == 0 else self.op("Transpose", [x], perm=[1, 0, 2])
        reverse = attrs.get("direction", b"forward") in (b"reverse", "reverse")
        c0 = inputs[6] if self.kind == "LSTM" else ""
        if fuse and fusable(self.kind, attrs, self.activations, weights[w].dtype):
            self.fused(xs, weights[w], weights[r], bias, weights.get(inputs[7]) if
                       self.kind == "LSTM" and inputs[7] else None,
                       Recurrence(self.kind, steps, directions, batch, hidden, reverse,
                                  tuple(self.activations[:len(DEFAULT_ACTIVATIONS[self.kind])]),
                                  peepholes=self.kind == "LSTM" and bool(inputs[7]),
                                  final_cell=len(node.output) > 2 and bool(node.output[2])),
                       layout, [h0, c0], weights)
            return
        outs, finals, cells = [], [], []
        # initial states [D|B, B|D, H], one [B, H] per direction
        h0s = self.parts(h0, directions, layout, [batch, hidden]) if h0 else [None] * directions
        c0s = self.parts(c0, directions, layout, [batch, hidden]) if c0 else [None] * directions
        for d in range(directions):
            backward = reverse or d == 1
            init = [h0s[d], c0s[d]]
            hs, h, c = self.direction(xs, weights[w][d], weights[r][d], bias[d],
                                      weights.get(inputs[7]) if self.kind == "LSTM" else None,
                                      steps, batch, hidden, backward, init, attrs, d)
            # steps stacked as rows, one reshape for all (a reshape each is a call each)
            outs.append(self.reshape(self.op("Concat", hs, axis=0), [steps, 1, batch, hidden]))
            finals.append(self.reshape(h, [1, batch, hidden]))
            if c is not None:
                cells.append(self.reshape(c, [1, batch, hidden]))
        results = [outs, finals, cells]
        perms = [[2, 0, 1, 3], [1, 0, 2], [1, 0, 2]]  # Y, Y_h, Y_c to layout 1
        for i, name in enumerate(node.output[:3]):
            if not name:
                continue
            value = self.op("Concat", results[i], axis=1 if i == 0 else 0) \
                if len(results[i]) > 1 else results[i][0]
            self.op("Transpose" if layout else "Identity", [value], out=name,
                    **({"perm": perms[i]} if layout else {}))

    def fused(self, xs, w, r, bias, peep, rec: Recurrence, layout: int, states, weights):
        """The input projection of every step and direction (one ``MatMul``), and the layer
        the fused function computes from it (``self.layer``)."""
        gh, hidden, dirs = rec.gates * rec.hidden, rec.hidden, rec.directions
        zeros = np.zeros(gh, np.float32)
        in_bias, rec_bias = [], []
        for d in range(dirs):
            wb, rb = bias[d][:gh], bias[d][gh:]
            if self.kind == "GRU":  # the candidate's recurrent bias is gated by r, in the cell
                in_bias.append(wb + np.concatenate([rb[:2 * hidden], zeros[:hidden]]))
                rec_bias.append(np.concatenate([zeros[:2 * hidden], rb[2 * hidden:]]))
            else:
                in_bias.append(wb + rb)
                rec_bias.append(zeros)
        proj = self.op("Add", [self.op("MatMul", [xs, self.const(np.concatenate(
            [w[d].T for d in range(dirs)], axis=1))]), self.const(np.concatenate(in_bias))])
        shape = (dirs, rec.batch, hidden)

        def state(name):  # [D, B, H] for either layout: an array when constant
            if not name:
                return np.zeros(shape, np.float32)
            if name in weights:
                return np.ascontiguousarray(weights[name].transpose(1, 0, 2) if layout
                                            else weights[name]).astype(np.float32)
            return self.op("Transpose", [name], perm=[1, 0, 2]) if layout else name

        # the values the layer reads first: the importer meets them before its outputs' users
        projection = self.reshape(proj, [rec.steps, rec.batch, dirs, gh])
        h0, c0 = state(states[0]), state(states[1])  # c0: "" but for an LSTM
        # [D, 3H], or one [3H] row for both directions; zeros without peepholes
        peep = np.zeros((dirs, 3, hidden), np.float32) if peep is None else np.broadcast_to(
            np.asarray(peep, np.float32).reshape(-1, 3, hidden), (dirs, 3, hidden)).copy()
        outputs = []
        perms = [[2, 0, 1, 3], [1, 0, 2], [1, 0, 2]]  # Y, Y_h, Y_c to layout 1
        for i, name in enumerate((list(self.node.output) + ["", ""])[:3]):
            cut = f"{self.prefix}out{i}" if name else ""
            outputs.append(cut)
            if name:
                self.op("Transpose" if layout else "Identity", [cut], out=name,
                        **({"perm": perms[i]} if layout else {}))
        self.layer = FusedLayer(
            rec, projection=projection, h0=h0, c0=c0,
            rt=np.ascontiguousarray(np.transpose(r, (0, 2, 1))).astype(np.float32),
            rb=np.stack(rec_bias).astype(np.float32), peep=peep, outputs=tuple(outputs))

    def check(self, attrs: dict):
        if attrs.get("clip") is not None:
            raise self.error("its clip attribute")
        if int(attrs.get("input_forget", 0)):
            raise self.error("input_forget=1")
        acts = [a.decode() if isinstance(a, bytes) else a for a in attrs.get("activations", [])]
        defaults = DEFAULT_ACTIVATIONS[self.kind]
        bad = sorted(set(acts) - ACTIVATIONS)
        if bad or (acts and len(acts) not in (len(defaults), 2 * len(defaults))):
            raise self.error(f"its activations {acts} (unrolled: {', '.join(sorted(ACTIVATIONS))})")
        # one list per direction; a bidirectional node's two may be given as one
        self.activations = acts * (2 if len(acts) == len(defaults) else 1) if acts else \
            defaults * 2

    def direction(self, xs, w, r, b, peep, steps, batch, hidden, backward, init, attrs, d):
        """Per-step hidden states (in time order), the last hidden state and cell state."""
        gates = GATES[self.kind]
        acts = self.activations[d * len(DEFAULT_ACTIVATIONS[self.kind]):]
        f, g = acts[0], acts[1] if len(acts) > 1 else acts[0]
        wb, rb = b[:gates * hidden], b[gates * hidden:]
        lbr = self.kind == "GRU" and int(attrs.get("linear_before_reset", 0))
        # X Wᵀ + Wb (+ Rb, except GRU's candidate bias, which goes with h Rᵀ) for every step
        in_bias = wb + rb if self.kind != "GRU" else wb + np.concatenate(
            [rb[:2 * hidden], np.zeros(hidden, rb.dtype)])
        proj = self.op("Add", [self.op("MatMul", [xs, self.const(w.T)]), self.const(in_bias)])
        zeros = self.const(np.zeros((batch, hidden), w.dtype))
        # each constant made once, for every step (a copy per step would be a weight each)
        rt = self.const(r.T) if self.kind != "GRU" or lbr else None
        if peep is not None:
            p = peep[d] if peep.ndim == 2 else peep
            pi, po, pf = (self.const(p[k * hidden:(k + 1) * hidden]) for k in range(3))
        h = init[0] or zeros
        c = (init[1] or zeros) if self.kind == "LSTM" else None
        hs = [None] * steps
        # rows of steps x examples, split into a [batch, gates x hidden] part per step
        xts = self.split(self.reshape(proj, [steps * batch, gates * hidden]), steps, axis=0)
        if self.kind == "GRU" and lbr:  # h Rᵀ + (0, 0, Rbh)
            gru = (rt, self.const(np.concatenate([np.zeros(2 * hidden, rb.dtype),
                                                  rb[2 * hidden:]])))
        elif self.kind == "GRU":  # h Rzrᵀ, then (r * h) Rhᵀ + Rbh
            gru = (self.const(r[:2 * hidden].T), self.const(r[2 * hidden:].T),
                   self.const(rb[2 * hidden:]))
        for t in (reversed(range(steps)) if backward else range(steps)):
            xt = xts[t]
            if self.kind == "RNN":
                h = self.act(f, self.op("Add", [xt, self.op("MatMul", [h, rt])]))
            elif self.kind == "LSTM":
                pre = self.op("Add", [xt, self.op("MatMul", [h, rt])])
                i, o, fg, cand = self.split(pre, 4, axis=1)
                if peep is not None:
                    i = self.op("Add", [i, self.op("Mul", [c, pi])])
                    fg = self.op("Add", [fg, self.op("Mul", [c, pf])])
                c = self.op("Add", [self.op("Mul", [self.act(f, fg), c]),
                                    self.op("Mul", [self.act(f, i), self.act(g, cand)])])
                if peep is not None:
                    o = self.op("Add", [o, self.op("Mul", [c, po])])
                h = self.op("Mul", [self.act(f, o), self.act(acts[2] if len(acts) > 2 else g, c)])
            else:
                h = self.gru_step(xt, h, f, g, gru)
            hs[t] = h
        return hs, h, c

    def gru_step(self, xt, h, f, g, consts):
        """One GRU step; ``consts`` (two: ``linear_before_reset``, three: not) from
        ``direction``."""
        xz, xr, xh = self.split(xt, 3, axis=1)
        if len(consts) == 2:  # PyTorch's form: r gates the recurrent product, bias included
            rt, cand_bias = consts
            hr = self.op("Add", [self.op("MatMul", [h, rt]), cand_bias])
            hz, hr_, hh = self.split(hr, 3, axis=1)
            z = self.act(f, self.op("Add", [xz, hz]))
            reset = self.act(f, self.op("Add", [xr, hr_]))
            cand = self.act(g, self.op("Add", [xh, self.op("Mul", [reset, hh])]))
        else:
            rzr, rh_t, rbh = consts
            hz, hr_ = self.split(self.op("MatMul", [h, rzr]), 2, axis=1)
            z = self.act(f, self.op("Add", [xz, hz]))
            reset = self.act(f, self.op("Add", [xr, hr_]))
            rh = self.op("MatMul", [self.op("Mul", [reset, h]), rh_t])
            cand = self.act(g, self.op("Add", [xh, self.op("Add", [rh, rbh])]))
        # (1 - z) * cand + z * h  ==  cand + z * (h - cand)
        return self.op("Add", [cand, self.op("Mul", [z, self.op("Sub", [h, cand])])])

    # ---- node writers
    def op(self, op_type: str, inputs: list, out: str | None = None, **attrs) -> str:
        from onnx import helper

        self.count += 1
        out = out or f"{self.prefix}{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out],
                                           name=f"{self.prefix}n{self.count}", **attrs))
        return out

    def const(self, value: np.ndarray) -> str:
        from onnx import numpy_helper

        value = np.array(value, order="C")  # 0-d stays 0-d
        key = (value.dtype.str, value.shape, value.tobytes()) if value.size <= 64 else None
        if key in self.small:  # reshapes' shapes: one each
            return self.small[key]
        self.count += 1
        name = f"{self.prefix}c{self.count}"
        self.initializers.append(numpy_helper.from_array(value, name))
        if key is not None:
            self.small[key] = name
        return name

    def split(self, value: str, n: int, axis: int) -> list[str]:
        """``value`` in ``n`` equal parts along ``axis`` (the axis kept)."""
        from onnx import helper

        if n == 1:
            return [value]
        self.count += 1
        outs = [f"{self.prefix}{self.count}_{k}" for k in range(n)]
        # opset 18 asks for the count; before it, the outputs give it
        attrs = {"num_outputs": n} if self.opset >= 18 else {}
        self.nodes.append(helper.make_node("Split", [value], outs, axis=axis,
                                           name=f"{self.prefix}n{self.count}", **attrs))
        return outs

    def parts(self, value: str, n: int, axis: int, shape: list) -> list[str]:
        """``value`` split along ``axis`` into ``n`` parts of one slice each, that axis
        dropped (each part reshaped to ``shape``)."""
        return [self.reshape(part, shape) for part in self.split(value, n, axis)]

    def reshape(self, value: str, shape: list) -> str:
        return self.op("Reshape", [value, self.const(np.array(shape, np.int64))])

    def act(self, name: str, value: str) -> str:
        return self.op(name, [value])

    def error(self, what: str) -> ModelImportError:
        return ModelImportError(f"{self.kind} node {self.node.name or self.node.output[0]!r}: "
                                f"cannot unroll it: {what}")
