"""Compile a whole model with the best configs found."""
from __future__ import annotations

import os
import warnings
from collections.abc import Mapping

from ..errors import strict
from ..frontend import Model
from ..measure import use_threads
from ..records import Record, best_record, load_records, records_for
from ..space import (Config, InvalidConfigError, apply_config, task_seeds, task_space,
                     template_for)
from ..workload import Task
from .compiled import CompiledModel
from .extract import DEFAULT_SCHEDULE, fused_calls, fused_module, workload_of
from .weights import lift_weights


def best_records_of(log: str | os.PathLike, tasks: list[Task]) -> dict[str, Record]:
    """``{task key: best error-free record}`` of the tasks that have one in the records log,
    among those whose config belongs to the task's current space (a template that changed its
    space, padding a ragged axis say, leaves older records that no longer apply)."""
    records = load_records(log)
    found = {}
    for task in tasks:
        record = best_record(records, task)
        if record is None:
            continue
        space = task_space(task)
        if not _belongs(space, record.config):
            ok = sorted((r for r in records_for(records, task) if r.ok), key=lambda r: r.cost)
            record = next((r for r in ok if _belongs(space, r.config)), record)
        found[task.key] = record
    return found


def _belongs(space, config: Config) -> bool:
    try:
        space.digits(config)
    except InvalidConfigError:
        return False
    return True


Best = Mapping[str, Config] | str | os.PathLike  # task key -> config, or a records log


def resolve_best(best: Best, tasks: list[Task]) -> dict[str, Config]:
    """``{task key: config}``: a mapping as given (keys of other tasks are simply never looked
    up), or the config of each task's best record in a records log."""
    if isinstance(best, (str, os.PathLike)):
        return {k: r.config for k, r in best_records_of(best, tasks).items()}
    return {k: v if isinstance(v, Config) else Config(v) for k, v in best.items()}


def scheduled_module(model: Model, target: dict, best: Best, template: str | None = None,
                     graph=None):
    """The fused module of ``model`` with every function whose task has a config in ``best``
    replaced by its scheduled version; returns ``(module, names of the tuned functions)``.

    The other functions stay unscheduled, i.e. get TVM's default lowering when compiled. A
    schedule that packs a constant weight has the packing split off into a function of its
    own, which ``FoldConstant`` runs here, once: the module holds the packed weights.
    """
    mod, tuned, _ = _schedule(model, target, best, template, graph)
    return mod, tuned


def _schedule(model: Model, target: dict, best: Best, template: str, graph,
              seeds: bool = False):
    """``scheduled_module``'s work, plus each fused function's ``function_table`` entry.
    With ``seeds``, a CPU function without a config gets its template's first seed, or where
    no template fits the generic rule (``space.cpu_fallback``): TVM's unscheduled default is
    single-threaded and scalar, 10-40x slower (SqueezeNet 1.1: 195 ms against 4.9 ms with
    seeds everywhere). Functions the VM runs as views of their input are left alone."""
    import tvm
    from tvm import relax

    fused = fused_module(model, target, graph)
    calls = [(call, Task(workload_of(call), dict(target),
                         template or template_for(target, call.func)))  # per function
             for call in fused_calls(fused)]
    configs = resolve_best(best, [task for _, task in calls])
    views = view_functions(fused)
    seeds = seeds and target.get("kind") == "llvm"  # a GPU gets dlight's rules instead
    tuned, scheduled, how = [], {}, {}
    for call, task in calls:
        if call.symbolic_args or call.name in views:
            continue
        if task.key not in scheduled:  # structurally equal functions share one schedule
            scheduled[task.key], how[task.key] = _schedule_one(task, call, configs, seeds)
        if scheduled[task.key] is None:
            continue
        fused[fused.get_global_var(call.name)] = _as_replacement(scheduled[task.key], call.func)
        tuned.append(call.name)
    with tvm.target.Target(target):
        fused = tvm.transform.Sequential([relax.transform.SplitLayoutRewritePreproc(),
                                          relax.transform.FoldConstant(),
                                          relax.transform.DeadCodeElimination()])(fused)
    table = function_table(calls, tuned, configs, {k for k, v in how.items() if v == "seeded"},
                           target=target, views=views,
                           fallback={k for k, v in how.items() if v == "fallback"})
    return fused, tuple(tuned), table


def _schedule_one(task, call, configs: dict, seeds: bool):
    """``(scheduled PrimFunc or None, "tuned" | "seeded" | "fallback" | None)`` for one task:
    its config (which must apply), else with ``seeds`` its template's first seed (added to
    ``configs``), else the generic rule."""
    config = configs.get(task.key)
    if config is not None:
        try:
            space = task_space(task)
            space.digits(config)
        except InvalidConfigError as err:
            # a record of an older version of the template's space (the row-wise space grew
            # knobs): the task is rebuilt like one without a record, and says so
            warnings.warn(f"{call.name}: its config does not belong to the current "
                          f"{task.template} space ({err}); built without it", stacklevel=3)
            configs.pop(task.key)
            config = None
    if config is not None:
        try:
            return apply_config(task, config, space).mod["main"], "tuned"
        except InvalidConfigError as err:
            raise InvalidConfigError(f"config for {call.name} (task {task.key}) does not "
                                     f"apply: {err}") from err
    if not seeds:
        return None, None
    try:
        first = task_seeds(task)[:1]
        if first:
            func = apply_config(task, first[0]).mod["main"]
            configs[task.key] = first[0]
            return func, "seeded"
    except Exception as err:  # the template does not fit (or trips over) this function: the rule
        if strict() and not isinstance(err, InvalidConfigError):  # TENSORTUNE_STRICT: a bug
            raise
    from ..space.cpu_fallback import fallback_schedule
    from ..workload import vector_lanes

    try:
        return fallback_schedule(call.func, vector_lanes(task.target)).mod["main"], "fallback"
    except Exception:  # nothing applies: TVM's default lowering, reported as such
        if strict():  # TENSORTUNE_STRICT: raise what would be swallowed
            raise
        return None, None


def view_functions(fused) -> set[str]:
    """Names of the functions that TVM's ``RewriteDataflowReshape`` (run when the model is
    compiled) turns into views of their input: the VM runs no kernel for them, so they need
    no schedule. A reshape it leaves (outside a dataflow block, say) stays a copy kernel."""
    from tvm import relax

    before = {c.name for c in fused_calls(fused)}
    return before - {c.name for c in fused_calls(relax.transform.RewriteDataflowReshape()(fused))}


def function_table(calls, tuned, configs=None, seeded=(), target=None, views=(),
                   fallback=()) -> dict[str, dict]:
    """``{function name: {"task", "flops", "calls", "tuned", "schedule", "config"}}`` of a
    model's fused functions: what a profile needs to turn times into GFLOP/s, and how each was
    scheduled: ``tuned`` (a config given), ``seeded`` (its template's first seed),
    ``fallback`` (the generic rule, no template fitting), ``view`` (no kernel: the VM runs a
    reshape as a view), ``dlight`` (a GPU function without a config: dlight's default GPU
    rules) or ``default`` (TVM's unscheduled default lowering: one core, scalar)."""
    table = {}
    configs = configs or {}
    gpu = (target or {}).get("kind") == "cuda"
    for call, task in calls:
        try:
            flops = int(task.workload.flops)
        except Exception:  # estimate_tir_flops refuses some non-arithmetic functions
            flops = 0
        done = call.name in tuned
        if call.name in views:
            how = "view"
        elif done:
            how = ("seeded" if task.key in seeded else "fallback" if task.key in fallback
                   else "tuned")
        else:
            how = "dlight" if gpu else "default"
        config = configs.get(task.key) if done else None
        table[call.name] = {"task": task.key, "flops": flops, "calls": call.calls, "tuned": done,
                            "schedule": how, "config": config.to_json() if config else None}
    return table


def default_functions(table: dict) -> list[str]:
    """The functions of a ``function_table`` built with TVM's unscheduled default."""
    return [name for name, info in table.items() if schedule_of(info) == "default"]


def schedule_of(info: dict) -> str:
    """A ``function_table`` entry's schedule (a model saved before schedules were named says
    only whether it was tuned)."""
    return info.get("schedule") or ("tuned" if info.get("tuned") else "default")


def _as_replacement(scheduled, original):
    """The scheduled function with the original's attributes (no global symbol, as FuseTIR left
    it), marked scheduled so no later default schedule touches it."""
    func = scheduled.without_attr("global_symbol")
    if original.attrs is not None:
        func = func.with_attrs(dict(original.attrs.items()))
    return func.with_attr("tirx.is_scheduled", True)


def compile_fused(mod, target: dict, cuda_graph: bool = True):
    """Compile a fused (already legalized) module: TVM's pipeline after ``FuseTIR`` (for a GPU,
    first dlight's default schedules for the functions no config scheduled; ``cuda_graph``:
    the VM captures the model's kernels as a CUDA graph on the first run and replays it: on
    an H100, MobileNet V2 0.51 ms against 0.58 ms launched one by one)."""
    import tvm
    from tvm.relax import pipeline

    tgt = tvm.target.Target(target)
    if target.get("kind") == "cuda":
        from tvm.relax.backend.cuda import pipeline as cuda_pipeline

        default = [p for p in cuda_pipeline.legalize_passes(tgt)
                   if p.info.name == DEFAULT_SCHEDULE]
        rest = tvm.transform.Sequential(default + cuda_pipeline.dataflow_lower_passes(tgt)
                                        + cuda_pipeline.finalize_passes(tgt))
        config = {"relax.backend.use_cuda_graph": bool(cuda_graph)}
        with tgt, tvm.transform.PassContext(config=config):
            return tvm.compile(mod, target=tgt, relax_pipeline=rest)
    try:
        lower = pipeline.dataflow_lower_passes(tgt)
    except AttributeError:
        # TVM 0.27's cpu_generic package does not export this function (its pipeline module
        # defines it); MetaSchedule's compile_relax falls back the same way
        from tvm.relax.backend.cpu_generic import pipeline as cpu_pipeline

        lower = cpu_pipeline.dataflow_lower_passes(tgt)
    rest = tvm.transform.Sequential(lower + pipeline.finalize_passes(tgt))
    with tgt:
        return tvm.compile(mod, target=tgt, relax_pipeline=rest)


def build_model(model: Model, target: dict, best: Best | None = None,
                template: str | None = None, threads: int | None = None,
                graph=None, cuda_graph: bool = True) -> "CompiledModel":
    """Compile ``model`` for ``target``, each tuned function with its best config.

    ``best`` maps task keys (``Task.key``) to configs, or is the path of a records log whose
    best record per task is used; a function without one gets its template's first seed
    (CPU), or keeps TVM's default lowering when ``best`` is None (the untuned build).
    ``threads`` sizes TVM's thread pool for running the result (default: every CPU). The
    weights are parameters of the library, not part of it (``tasks.weights``). ``cuda_graph``:
    see ``compile_fused``.
    """
    use_threads(threads or os.cpu_count() or 1)
    mod, tuned, functions = _schedule(model, target, {} if best is None else best, template,
                                      graph, seeds=best is not None)
    mod, weights = lift_weights(mod)
    executable = compile_fused(mod, target, cuda_graph)
    return CompiledModel(executable, model.inputs, model.outputs, tuned, model.name, dict(target),
                         functions=functions, weights=weights)


