"""Task extraction: a model's fused TIR functions, de-duplicated, weighted by call count.

The pipeline is split in two so that the MetaSchedule route can share it:

- ``prepare``: inference-only graph rewrites on Relax (batch-norm folded into the preceding
  convolution's weights and bias, the remaining composite ops decomposed, constants folded)
  and the whole-model rewrites of ``graph.GraphOptions`` (NHWC activations and HWIO weights,
  Winograd for 3x3 convolutions);
- ``fuse``: TVM's own CPU legalization (``LegalizeOps``, ``AnnotateTIROpPattern``,
  ``FoldConstant``, ``FuseOps``, ``FuseTIR``), exactly the passes that ``tvm.compile`` and
  MetaSchedule's ``compile_relax`` run, so they rebuild the very PrimFuncs extracted here; then
  each function's constant (weight) parameters are marked ``layout_free_buffers``, which lets a
  schedule pack them once at compile time instead of on every call.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable

from ..errors import strict
from ..frontend import Model
from ..space import InvalidConfigError, task_space, template_for
from ..workload import PrimFuncWorkload, Task, WorkloadError, vector_lanes
from .batchnorm import fold_batch_norm_pass
from .graph import GraphOptions

DEFAULT_SCHEDULE = "ApplyDefaultSchedule"  # dlight's pass in TVM's GPU legalization


@dataclasses.dataclass(frozen=True)
class TuneTask:
    """One distinct fused function of a model.

    ``weight`` is how many times the model calls it, ``functions`` the global names in the
    fused module that stand for it, ``tunable`` whether the task's template has a space for it
    (``reason`` says why not, or summarizes the space).
    """

    task: Task
    weight: int
    functions: tuple[str, ...]
    tunable: bool
    reason: str

    @property
    def key(self) -> str:
        return self.task.key

    @property
    def name(self) -> str:
        return self.task.workload.name

    @functools.cached_property
    def flops(self) -> int:
        """FLOPs of one call (0 when TVM cannot estimate them)."""
        try:
            return self.task.workload.flops
        except Exception:  # estimate_tir_flops refuses some non-arithmetic functions
            return 0

    def describe(self) -> str:
        state = "tunable" if self.tunable else "untunable"
        return f"{self.task.workload.describe()} x{self.weight} [{state}: {self.reason}]"


def prepare(mod, graph=None, target: dict | None = None):
    """Inference rewrites before legalization: fold batch-norm into convolutions, decompose
    what is left of it (and other composite ops), fold constants, then the whole-model
    rewrites of ``graph`` (``GraphOptions.of``: layout, Winograd) for ``target``'s vector width
    (an LLVM one; None or another kind: AVX-512's). Each step that raises is skipped with a
    warning (``graph.guarded``): what it leaves, TVM's legalization still takes."""
    import tvm
    from tvm import relax

    from .graph import guarded

    # needs constant weights: the importers bind them, so every conv + BN pair of a torch
    # or ONNX CNN is caught; a BN elsewhere is decomposed into elementwise ops below
    mod = guarded("batch-norm folding", fold_batch_norm_pass(), mod)
    mod = guarded("inference decomposition", tvm.transform.Sequential([
        relax.transform.DecomposeOpsForInference(),
        relax.transform.CanonicalizeBindings(),
    ]), mod)
    options = GraphOptions.of(graph)
    mod = options.before_folding(mod)
    mod = guarded("constant folding", relax.transform.FoldConstant(), mod)
    cpu = target is not None and target.get("kind") == "llvm"
    return options.rewrite(mod, vector_lanes(target) if cpu else None)


def fuse(mod, target: dict, layout_free: bool = True):
    """Legalize a prepared module into TIR and fuse it: TVM's CPU pipeline up to ``FuseTIR``;
    ``layout_free`` then marks the functions' constant parameters (MetaSchedule's
    ``compile_relax`` does not, so its lookups need ``False``)."""
    import tvm
    from tvm.relax import pipeline

    tgt = tvm.target.Target(target)
    # a GPU pipeline ends legalization with dlight's default schedules: the tasks are the
    # functions before them (``compile.compile_fused`` applies them to what stays untuned)
    legalize = [p for p in pipeline.legalize_passes(tgt) if p.info.name != DEFAULT_SCHEDULE]
    # opt_level 3 as in MetaSchedule's compile_relax: FuseOps reads the level from the context,
    # and the functions must come out the same for a MetaSchedule database to match them
    with tgt, tvm.transform.PassContext(opt_level=3):
        fused = tvm.transform.Sequential(pipeline.library_dispatch_passes(tgt) + legalize)(mod)
    return mark_layout_free(fused) if layout_free else fused


def mark_layout_free(mod):
    """Set ``layout_free_buffers`` on every PrimFunc to the parameters that are constants at
    all its call sites (TVM's ``AttachAttrLayoutFreeBuffers`` does the same but renames the
    functions, which would no longer match MetaSchedule's and the records' names)."""
    from tvm import relax
    from tvm.ir import GenericConst, Op

    call_tir = Op.get("relax.call_tir")
    constant: dict = {}

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(call_tir):
            args = expr.args[1].fields if isinstance(expr.args[1], relax.Tuple) else [expr.args[1]]
            here = {i for i, a in enumerate(args) if isinstance(a, GenericConst)}
            name = expr.args[0].name_hint
            constant[name] = constant[name] & here if name in constant else here

    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    for name, indices in constant.items():
        gv = mod.get_global_var(name)
        mod[gv] = mod[gv].with_attr("layout_free_buffers", sorted(indices))
    return mod


def fused_module(model: Model, target: dict, graph=None):
    """``fuse(prepare(model.mod, graph, target), target)``: the module whose PrimFuncs are the
    tasks."""
    return fuse(prepare(model.mod, graph, target), target)


@dataclasses.dataclass(frozen=True)
class FusedCall:
    """A PrimFunc of the fused module and how it is called."""

    name: str
    func: object  # tvm.tirx.PrimFunc
    calls: int
    num_outputs: int
    symbolic_args: bool  # called with extra TIR shape variables


def fused_calls(fused) -> list[FusedCall]:
    """Every PrimFunc called through ``call_tir`` from a Relax function of ``fused``, in order
    of first call."""
    from tvm import relax
    from tvm.ir import Op

    call_tir = Op.get("relax.call_tir")
    order: dict[str, list] = {}

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(call_tir):
            gv = expr.args[0]
            n_args = len(expr.args[1].fields) if isinstance(expr.args[1], relax.Tuple) else 1
            entry = order.setdefault(gv.name_hint, [0, n_args, len(expr.args) > 2])
            entry[0] += 1

    for _, func in fused.functions.items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    out = []
    for name, (calls, n_args, symbolic) in order.items():
        func = fused[name]
        out.append(FusedCall(name, func, calls, len(func.params) - n_args, symbolic))
    return out


def workload_of(call: FusedCall) -> PrimFuncWorkload:
    return PrimFuncWorkload.from_prim_func(call.func, call.name, max(call.num_outputs, 1))


def extract_tasks(model: Model, target: dict, template: str | None = None,
                  graph=None) -> list[TuneTask]:
    """The distinct fused functions of ``model`` as tasks, in order of first use.

    Structurally equal functions (names aside) are one task whose weight is their total call
    count. Every function is returned; those the template (default: the function's,
    ``space.template_for``) cannot schedule have ``tunable=False`` and keep TVM's default
    lowering when the model is built.
    """
    groups: dict[str, list] = {}
    for call in fused_calls(fused_module(model, target, graph)):
        workload = workload_of(call)
        group = groups.setdefault(workload.key, [workload, 0, [], call])
        group[1] += call.calls
        group[2].append(call.name)
    tasks = []
    for workload, weight, names, call in groups.values():
        # per function: on CUDA a matrix product gets ``cuda.gemm``, the rest ``cuda.generic``
        task = Task(workload, dict(target), template or template_for(target, call.func))
        tunable, reason = tunability(task, call)
        tasks.append(TuneTask(task, weight, tuple(names), tunable, reason))
    return tasks


def tunability(task: Task, call: FusedCall) -> tuple[bool, str]:
    """Whether ``task`` can be tuned (measured), and why not or the size of its space."""
    from tvm.relax.analysis import has_reshape_pattern

    if call.symbolic_args:
        return False, "called with symbolic shape arguments"
    if has_reshape_pattern(call.func):
        # RewriteDataflowReshape turns the call into a view of its input: no kernel runs
        return False, "a reshape: the VM runs it as a view of its input, no kernel"
    if call.num_outputs != 1:
        # the row-wise template schedules it (its seed, when the model is built), but the
        # runner times and checks a single output, so it is not measured
        return False, f"{call.num_outputs} outputs: built with its seed, not measured"
    try:
        task.workload.input_shapes, task.workload.output_shape  # noqa: B018 - validates shapes
        space = task_space(task)
    except (WorkloadError, InvalidConfigError) as err:  # TemplateMismatch is an InvalidConfigError
        return False, str(err)
    except Exception as err:  # a template tripping over an unusual function: not tunable
        if strict():  # TENSORTUNE_STRICT: raise what would be swallowed
            raise
        return False, f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    size = space.size
    return True, f"{task.template}: {len(space.knobs)} knobs, {size:.3g} configs"


def list_untunable(tasks: Iterable[TuneTask]) -> list[TuneTask]:
    """The tasks no template fits (they run with TVM's default lowering)."""
    return [t for t in tasks if not t.tunable]
