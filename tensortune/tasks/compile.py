"""Compile a whole model with the best configs found."""
from __future__ import annotations

import os
from collections.abc import Mapping

from ..frontend import Model
from ..measure import use_threads
from ..records import Record, best_record, load_records
from ..space import Config, InvalidConfigError, apply_config, task_seeds, template_for
from ..workload import Task
from .compiled import CompiledModel
from .extract import DEFAULT_SCHEDULE, fused_calls, fused_module, tunability, workload_of


def best_records_of(log: str | os.PathLike, tasks: list[Task]) -> dict[str, Record]:
    """``{task key: best error-free record}`` of the tasks that have one in the records log."""
    records = load_records(log)
    found = {}
    for task in tasks:
        record = best_record(records, task)
        if record is not None:
            found[task.key] = record
    return found


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
    With ``seeds``, a CPU function without a config gets its template's first seed: TVM's
    unscheduled default is single-threaded and scalar, 10-40x slower (SqueezeNet 1.1: 195 ms
    against 4.9 ms with seeds everywhere)."""
    import tvm
    from tvm import relax

    template = template or template_for(target)
    fused = fused_module(model, target, graph)
    calls = [(call, Task(workload_of(call), dict(target), template)) for call in fused_calls(fused)]
    configs = resolve_best(best, [task for _, task in calls])
    seeded = set()
    if seeds and target.get("kind") == "llvm":
        for call, task in calls:
            if task.key not in configs and task.key not in seeded and tunability(task, call)[0]:
                first = task_seeds(task)[:1]
                if first:
                    configs[task.key] = first[0]
                    seeded.add(task.key)
    tuned, scheduled = [], {}
    for call, task in calls:
        config = configs.get(task.key)
        if config is None or call.symbolic_args or call.num_outputs != 1:
            continue
        if task.key not in scheduled:  # structurally equal functions share one schedule
            try:
                scheduled[task.key] = apply_config(task, config).mod["main"]
            except InvalidConfigError as err:
                if task.key in seeded:  # a seed that does not fit: TVM's default then
                    configs.pop(task.key)
                    continue
                raise InvalidConfigError(f"config for {call.name} (task {task.key}) does not "
                                         f"apply: {err}") from err
        fused[fused.get_global_var(call.name)] = _as_replacement(scheduled[task.key], call.func)
        tuned.append(call.name)
    with tvm.target.Target(target):
        fused = tvm.transform.Sequential([relax.transform.SplitLayoutRewritePreproc(),
                                          relax.transform.FoldConstant(),
                                          relax.transform.DeadCodeElimination()])(fused)
    return fused, tuple(tuned), function_table(calls, tuned)


def function_table(calls, tuned) -> dict[str, dict]:
    """``{function name: {"task", "flops", "calls", "tuned"}}`` of a model's fused functions,
    what a profile needs to turn times into GFLOP/s."""
    table = {}
    for call, task in calls:
        try:
            flops = int(task.workload.flops)
        except Exception:  # estimate_tir_flops refuses some non-arithmetic functions
            flops = 0
        table[call.name] = {"task": task.key, "flops": flops, "calls": call.calls,
                            "tuned": call.name in tuned}
    return table


def _as_replacement(scheduled, original):
    """The scheduled function with the original's attributes (no global symbol, as FuseTIR left
    it), marked scheduled so no later default schedule touches it."""
    func = scheduled.without_attr("global_symbol")
    if original.attrs is not None:
        func = func.with_attrs(dict(original.attrs.items()))
    return func.with_attr("tirx.is_scheduled", True)


def compile_fused(mod, target: dict):
    """Compile a fused (already legalized) module: TVM's pipeline after ``FuseTIR`` (for a GPU,
    first dlight's default schedules for the functions no config scheduled)."""
    import tvm
    from tvm.relax import pipeline

    tgt = tvm.target.Target(target)
    if target.get("kind") == "cuda":
        from tvm.relax.backend.cuda import pipeline as cuda_pipeline

        default = [p for p in cuda_pipeline.legalize_passes(tgt)
                   if p.info.name == DEFAULT_SCHEDULE]
        rest = tvm.transform.Sequential(default + cuda_pipeline.dataflow_lower_passes(tgt)
                                        + cuda_pipeline.finalize_passes(tgt))
        with tgt:
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
                graph=None) -> "CompiledModel":
    """Compile ``model`` for ``target``, each tuned function with its best config.

    ``best`` maps task keys (``Task.key``) to configs, or is the path of a records log whose
    best record per task is used; a function without one gets its template's first seed
    (CPU), or keeps TVM's default lowering when ``best`` is None (the untuned build).
    ``threads`` sizes TVM's thread pool for running the result (default: every CPU).
    """
    use_threads(threads or os.cpu_count() or 1)
    mod, tuned, functions = _schedule(model, target, {} if best is None else best, template,
                                      graph, seeds=best is not None)
    executable = compile_fused(mod, target)
    return CompiledModel(executable, model.inputs, model.outputs, tuned, model.name, dict(target),
                         functions=functions)


