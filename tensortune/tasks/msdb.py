"""Export tuned configs as a MetaSchedule database, so TVM's own ``compile_relax`` applies them.

How MetaSchedule finds a schedule (TVM 0.27): ``compile_relax(db, mod, target, params)`` runs
the CPU dispatch and legalization passes (``LegalizeOps`` ... ``FuseOps``, ``FuseTIR``, at
``opt_level=3``) on ``mod``, then ``MetaScheduleApplyDatabase`` wraps every resulting PrimFunc
as ``IRModule({"main": func + global_symbol "main" + tirx.noalias})`` (MetaSchedule's
``normalize_mod``) and looks it up by structural equality. So:

- ``mod`` must be ``prepare(model.mod, graph, target)``, the module that ``extract.fuse`` starts
  from, and the PrimFuncs it yields are the tasks' functions less their ``layout_free_buffers``
  mark (so a weight packed at the root is packed on every call there, not folded);
- each record's workload is the task's function normalized the same way, and its trace the
  ``Schedule.trace`` of ``apply_config``, replayed by MetaSchedule on that workload.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ..frontend import Model
from ..space import apply_config
from .compile import Best, CompiledModel, best_records_of, resolve_best
from .extract import TuneTask, fuse, prepare

# run_secs of a record whose config was given without a measurement: MetaSchedule skips
# records without times (or at its 1e10 "undefined" default), and this ranks below any real one
UNMEASURED_SECS = 1e9


def workload_module(task: TuneTask):
    """The IRModule MetaSchedule will look this task's function up by."""
    import tvm

    func = task.task.workload.prim_func().with_attr("tirx.noalias", True)
    if "layout_free_buffers" in func.attrs:
        func = func.without_attr("layout_free_buffers")
    return tvm.IRModule({"main": func})


def write_metaschedule_db(tasks: Iterable[TuneTask], best: Best, work_dir: str | os.PathLike,
                          costs: Mapping[str, Sequence[float]] | None = None) -> Path:
    """Write ``database_workload.json`` and ``database_tuning_record.json`` to ``work_dir``:
    one tuning record per task that has a config in ``best`` (task key -> config, or a records
    log, whose best records also supply the measured times).

    ``costs`` gives measured seconds per task key for a mapping ``best``; tasks without get
    ``UNMEASURED_SECS``. A database already in ``work_dir`` is replaced. Returns ``work_dir``;
    open it with ``JSONDatabase(work_dir=...)``.
    """
    import tvm
    from tvm.s_tir import meta_schedule as ms

    tasks = [t for t in tasks if t.tunable]
    times = dict(costs or {})
    if isinstance(best, (str, os.PathLike)):
        records = best_records_of(best, [t.task for t in tasks])
        configs = {k: r.config for k, r in records.items()}
        times.update({k: r.costs for k, r in records.items()})
    else:
        configs = resolve_best(best, [t.task for t in tasks])
    out = Path(work_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("database_workload.json", "database_tuning_record.json"):
        (out / name).unlink(missing_ok=True)  # a database file is appended to, not replaced
    db = ms.database.JSONDatabase(work_dir=str(out), module_equality="structural")
    for t in tasks:
        config = configs.get(t.key)
        if config is None:
            continue
        sch = apply_config(t.task, config)
        mod = workload_module(t)
        secs = [float(c) for c in times.get(t.key, ())] or [UNMEASURED_SECS]
        db.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, db.commit_workload(mod), run_secs=secs,
            target=tvm.target.Target(t.task.target),
            args_info=ms.arg_info.ArgInfo.from_prim_func(mod["main"])))
    return out


def applied_functions(work_dir: str | os.PathLike, model: Model, target: dict,
                      graph=None) -> tuple[str, ...]:
    """The fused functions of ``model`` for which the database in ``work_dir`` has a schedule,
    found the way ``compile_relax`` finds them."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    db = ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=False)
    tgt = tvm.target.Target(target)
    fused = fuse(prepare(model.mod, graph, target), target, layout_free=False)
    with tgt, db, tvm.transform.PassContext(opt_level=3):
        applied = relax.transform.MetaScheduleApplyDatabase()(fused)
    return tuple(gv.name_hint for gv, f in applied.functions.items()
                 if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None
                 and bool(f.attrs.get("tirx.is_scheduled", False)))


def compile_with_metaschedule(work_dir: str | os.PathLike, model: Model, target: dict,
                              threads: int | None = None,
                              graph=None) -> CompiledModel:
    """Compile ``model`` through MetaSchedule's ``compile_relax`` with the database in
    ``work_dir`` (the route that does not use tensortune at build time)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from ..measure import use_threads

    use_threads(threads or os.cpu_count() or 1)
    db = ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=False)
    executable = ms.relax_integration.compile_relax(db, prepare(model.mod, graph, target),
                                                    tvm.target.Target(target), params=None)
    return CompiledModel(executable, model.inputs, model.outputs,
                         applied_functions(work_dir, model, target, graph), model.name,
                         dict(target))
