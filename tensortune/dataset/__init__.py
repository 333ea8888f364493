"""Datasets of measurements, for training and judging cost models.

* ``base``: ``Dataset`` / ``TaskData`` / ``TaskInfo``, the manifest beside a records log, and
  ``load_dataset``, which groups records by task and pools a config's timing sessions.
* ``collect``: ``resolve_tasks`` and ``collect_dataset`` (random, then XGBoost-guided configs).
* ``remeasure``: ``remeasure_dataset`` times every config again in later sessions.
* ``noise``: ``session_noise``, how well one session ranks the others (the labels' noise floor).

    ds = load_dataset("data/cpu.jsonl.gz")
    for t in ds: print(t.info.name, t.n_ok, t.best_gflops)
"""
from .base import (
    MODEL_OPS,
    Dataset,
    TaskData,
    TaskInfo,
    benchmark_workloads,
    default_name,
    features_path,
    load_dataset,
    manifest_path,
    op_kind,
    pool_results,
    read_manifest,
    record_sessions,
    shape_key,
    working_log,
    write_manifest,
)
from .collect import CollectedTask, collect_dataset, resolve_tasks
from .noise import SessionNoise, session_noise
from .remeasure import RemeasuredTask, remeasure_dataset

__all__ = ["Dataset", "TaskData", "TaskInfo", "benchmark_workloads", "op_kind", "default_name",
           "shape_key", "pool_results", "record_sessions", "load_dataset", "SessionNoise",
           "session_noise", "manifest_path", "features_path", "working_log", "read_manifest",
           "write_manifest", "MODEL_OPS", "resolve_tasks", "collect_dataset", "CollectedTask",
           "remeasure_dataset", "RemeasuredTask"]
