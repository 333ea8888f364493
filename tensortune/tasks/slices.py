"""Slices taken before a permutation, not after: attention's Q, K and V out of one projection.

A vision transformer (timm's ``Attention``, DeiT) projects Q, K and V together and splits
them with ``qkv.reshape(b, n, 3, heads, d).permute(2, 0, 3, 1, 4)`` and ``qkv[0]``,
``qkv[1]``, ``qkv[2]``. Imported, the permutation copies all of ``qkv`` into a new layout, each
``take`` then copies a third of it again, and K's transpose a third once more: five passes
over a tensor that the matmuls after them read once (DeiT-S on Zen 4: 1.0 ms of 48).
``take(permute_dims(x, axes), i, axis=a)`` with a constant index ``i`` is the same as
``permute_dims(take(x, i, axis=axes[a]), axes')``: the slice first, then a permutation of
that slice alone, which fuses with whatever injective op follows it (K's transpose) into one
copy per head tensor.

The same holds for a ``take`` of a constant index out of any tensor (DeiT's class token) and
for a ``split`` (GPT-2's ``qkv.split(h, dim=2)``): each part a strided slice, which fuses with
the reshape and permutation after it. A ``take`` whose indices come at run time (an embedding)
is clipped to its axis: the imported ``fast`` mode reads out of bounds on a bad index, where a
service must not crash.
"""
from __future__ import annotations

from .rewriting import static_shape

REWRITE = "slice before permute"


def remaining_axes(axes: list[int], axis: int) -> list[int]:
    """The permutation left once input axis ``axes[axis]`` is taken out: the other entries of
    ``axes`` in order, renumbered past the removed one."""
    removed = axes[axis]
    return [a - (a > removed) for i, a in enumerate(axes) if i != axis]


def slice_first_pass():
    """``take`` of a constant scalar index (out of a ``permute_dims`` or not) and each part of
    a ``split`` rewritten as strided slices; run-time indices clipped (above)."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from .rewriting import bound_call, mutate_functions

    @mutator
    class SliceFirst(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", None) != "relax.take":
                return call
            data, index = call.args
            if not _scalar_index(index) or call.attrs.axis is None:
                if call.attrs.mode == "fast":  # an index known only at run time: clipped
                    return relax.op.take(data, index, axis=call.attrs.axis, mode="clip")
                return call
            permute = bound_call(self, data, "relax.permute_dims")
            source = data if permute is None else permute.args[0]
            shape = static_shape(source)
            if not shape:
                return call
            axes = (list(range(len(shape))) if permute is None
                    else [int(a) for a in permute.attrs.axes] if permute.attrs.axes is not None
                    else list(reversed(range(len(shape)))))
            axis = int(call.attrs.axis) % len(shape)
            source_axis = axes[axis]
            i = int(index.value.numpy())
            if not -shape[source_axis] <= i < shape[source_axis]:
                return call
            i %= shape[source_axis]
            # a strided slice, not a take: TVM fuses it with the ops around it, while a take
            # (an index read from a tensor) stays a function of its own
            emit = self.builder_.emit
            sliced = emit(relax.op.strided_slice(source, axes=[source_axis], begin=[i],
                                                 end=[i + 1]))
            squeezed = relax.op.squeeze(sliced, axis=[source_axis])
            if permute is None:
                return squeezed
            return relax.op.permute_dims(emit(squeezed), remaining_axes(axes, axis))

        def visit_tuple_getitem_(self, node):
            node = super().visit_tuple_getitem_(node)
            split = bound_call(self, node.tuple_value, "relax.split")
            if split is None:
                return node
            bounds = _split_bounds(split)
            if bounds is None:
                return node
            axis, edges = bounds
            return relax.op.strided_slice(split.args[0], axes=[axis], begin=[edges[node.index]],
                                          end=[edges[node.index + 1]])

    @tvm.transform.module_pass(opt_level=0, name="tensortune.SliceFirst")
    def slice_first(mod, _ctx):
        mutator_ = SliceFirst(mod)
        # the permutations whose every slice moved before them are no longer used
        return relax.transform.DeadCodeElimination()(mutate_functions(mutator_, mod))

    return slice_first


def _split_bounds(split) -> tuple[int, list[int]] | None:
    """``(axis, edges)`` of a ``split`` of a tensor of known shape: part ``i`` is
    ``edges[i]:edges[i + 1]`` along ``axis``; None where the shape is not known."""
    from tvm.ir.prim import IntImm

    shape = static_shape(split.args[0])
    if not shape:
        return None
    axis = int(split.attrs.axis) % len(shape)
    size = shape[axis]
    sections = split.attrs.indices_or_sections
    if isinstance(sections, IntImm):
        parts = int(sections)
        step = -(-size // parts)  # TOPI's sections: equal parts, the last one shorter
        edges = [min(k * step, size) for k in range(parts)] + [size]
    else:
        edges = [0] + [min(max(int(i), 0), size) for i in sections] + [size]
    return axis, edges


def _scalar_index(index) -> bool:
    """Whether ``index`` is a 0-d integer constant (a ``take`` that drops its axis)."""
    from tvm.ir import GenericConst  # TVM 0.27's relax constant

    if not isinstance(index, GenericConst):
        return False
    value = index.value.numpy()
    return value.ndim == 0 and value.dtype.kind in "iu"
