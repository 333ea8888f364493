"""Whole-model tuning tasks: extraction from a model, compilation with the best configs, and
export of those configs as a MetaSchedule database.

    model = tensortune.frontend.from_torch(module, (x,))
    tasks = extract_tasks(model, target)              # distinct fused TIR functions + weights
    ...tune the tunable tasks (records log)...
    compiled = build_model(model, target, "log.jsonl")  # or {task key: Config}
    compiled.run(x_numpy); compiled.time(); compiled.save("out/")
"""
from .compile import build_model, scheduled_module
from .compiled import CompiledModel, TimingStats
from .extract import (TuneTask, extract_tasks, fuse, fused_calls, fused_module, list_untunable,
                      prepare)
from .msdb import applied_functions, compile_with_metaschedule, write_metaschedule_db

__all__ = ["TuneTask", "extract_tasks", "list_untunable", "prepare", "fuse", "fused_module",
           "fused_calls", "build_model", "scheduled_module", "CompiledModel", "TimingStats",
           "write_metaschedule_db", "applied_functions", "compile_with_metaschedule"]
