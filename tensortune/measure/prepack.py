"""Weights packed ahead of time: a candidate's weight-packing blocks as a function of their own.

A schedule may copy a constant weight into the layout its micro-kernel streams (the template
marks such a copy ``meta_schedule.layout_rewrite_preproc``). In a model that copy is folded
into the constants at compile time, so timing it on every call would charge the candidate for
work the model never does. The builder therefore splits it off with TVM's own
``SplitLayoutRewritePreproc`` (the pass the model build uses) into a ``prepack`` function;
the runner calls it once per candidate, untimed, and times ``main`` on the packed weights.
"""
from __future__ import annotations

from dataclasses import dataclass

PREPACK_ANNOTATION = "meta_schedule.layout_rewrite_preproc"


@dataclass(frozen=True)
class Prepack:
    """How to call a library with a ``prepack`` function.

    ``prepack(*(args[i] for i in inputs), *packed)`` fills one new array per entry of
    ``shapes``/``dtypes``; ``main`` then takes ``args`` with ``args[inputs[k]]`` replaced by
    ``packed[k]``.
    """

    inputs: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]

    def to_json(self) -> dict:
        return {"inputs": list(self.inputs), "shapes": [list(s) for s in self.shapes],
                "dtypes": list(self.dtypes)}

    @staticmethod
    def from_json(d: dict) -> "Prepack":
        return Prepack(tuple(int(i) for i in d["inputs"]),
                       tuple(tuple(int(x) for x in s) for s in d["shapes"]),
                       tuple(str(t) for t in d["dtypes"]))


def has_prepack(func) -> bool:
    """Whether a block of ``func`` (directly under its root, where the template puts whole
    copies) is marked as a weight layout rewrite."""
    from tvm.s_tir import Schedule

    sch = Schedule(func)
    return any(PREPACK_ANNOTATION in sch.get(b).annotations
               for b in sch.get_child_blocks(sch.get_sblock("root")))


def split_prepack(func, num_outputs: int = 1):
    """``(IRModule with "main" and "prepack", Prepack)`` for a scheduled function whose weight
    copies are marked, or ``(IRModule with "main", None)`` when none is."""
    import tvm

    if not has_prepack(func):
        return tvm.IRModule({"main": func}), None
    split, kernel = _split_in_relax(func, num_outputs)
    calls = _calls(split["main"])
    if len(calls) != 2:
        raise ValueError(f"expected a prepack call and a kernel call, found {len(calls)} calls")
    (pre_gv, pre_args), (main_gv, main_args) = calls
    params = list(split["main"].params)
    inputs = tuple(params.index(a) for a in pre_args)
    pre_func, main_func = split[pre_gv], split[main_gv]
    n_in = len(pre_args)
    packed = list(pre_func.params[n_in:])  # TVM 0.27: the parameters are the buffers
    # the kernel must take the original arguments with just the packed ones replaced
    for i, arg in enumerate(main_args):
        if (i in inputs) == (arg in params):
            raise ValueError(f"argument {i} of the prepacked kernel is not where expected")
    prepack = Prepack(inputs, tuple(tuple(int(d) for d in b.shape) for b in packed),
                      tuple(str(b.dtype) for b in packed))
    mod = tvm.IRModule({"main": _public(main_func, "main"), "prepack": _public(pre_func, "prepack")})
    return mod, prepack


def _split_in_relax(func, num_outputs: int):
    """Wrap ``func`` in a Relax function calling it, and run ``SplitLayoutRewritePreproc``."""
    import tvm
    from tvm import relax

    bufs = list(func.params)
    n_in = len(bufs) - num_outputs
    sinfo = [relax.TensorType([int(d) for d in b.shape], str(b.dtype)) for b in bufs]
    params = [relax.Var(f"arg{i}", sinfo[i]) for i in range(n_in)]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            kernel = bb.add_func(func.without_attr("global_symbol") if "global_symbol"
                                 in (func.attrs or {}) else func, "kernel")
            out_sinfo = sinfo[n_in:] if num_outputs > 1 else sinfo[n_in]
            out = bb.emit_output(relax.call_tir(kernel, params, out_sinfo))
        bb.emit_func_output(out)
    return relax.transform.SplitLayoutRewritePreproc()(bb.get()), kernel


def _calls(main):
    """``[(global var, [argument vars])]`` of the ``call_tir``s in ``main``, in order, with
    bindings of one var to another followed back to the first."""
    from tvm import relax
    from tvm.ir import Op

    call_tir = Op.get("relax.call_tir")
    alias, calls = {}, []

    def resolve(var):
        while var in alias:
            var = alias[var]
        return var

    for block in main.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Var):
                alias[binding.var] = value
            elif isinstance(value, relax.Call) and value.op.same_as(call_tir):
                args = value.args[1].fields if isinstance(value.args[1], relax.Tuple) else [
                    value.args[1]]
                calls.append((value.args[0], [resolve(a) for a in args]))
    return calls


def _public(func, name: str):
    return func.with_attr("global_symbol", name)
