"""The hardware-free tuning stage (Tuna's mode): tasks in, ``TunedRecords`` of predicted
picks out."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from types import MappingProxyType

from ..cost_model.pretrained import cuda_model
from ..measure import LocalBuilder, LocalRunner
from ..records import RecordWriter
from ..settings import Settings
from ..tuner.static import predict_many, shipped_model, time_top
from .values import TunedRecords


def tune_hardware_free(extract: Callable[[], list], target: dict, settings: Settings,
                       logs: Sequence[Path], prior: TunedRecords, verify_top: int = 0,
                       on_task: Callable | None = None, model=None,
                       effort: str = "full") -> TunedRecords:
    """Each tunable task's config from the cost model's predictions (``Session.
    tune_hardware_free`` says how); ``extract`` gives the tasks once the model's compile
    workers are starting. With ``verify_top`` the best predicted are timed here (the caller
    has checked that this host can) and recorded in ``logs`` (the run's, then the shared one,
    a copy). ``prior``'s verified picks are kept where a task is not timed again."""
    if target.get("kind") == "cuda" and model is None:
        model = cuda_model(target["arch"], settings.seed)
    static, verified = {}, dict(prior.verified)
    with shipped_model(settings, model) as model:  # its compile workers start now
        tasks = [t for t in extract() if t.tunable]
        picks = predict_many([t.task for t in tasks], model, settings, seed=settings.seed,
                             effort=effort, weights=[t.weight for t in tasks])
        for t, result in zip(tasks, picks, strict=True):
            static[t.key] = result
            if on_task:
                on_task(t, result)
    timed = 0
    if verify_top:
        m = settings.measure
        run_log, shared_log = logs
        with LocalBuilder(m.build_workers, m.build_timeout_s) as builder, \
                LocalRunner(m) as runner, RecordWriter(run_log) as log, \
                RecordWriter(shared_log, copy=True) as shared:
            for t in tasks:
                config, ran = time_top(static[t.key], verify_top, builder, runner,
                                       [log.append, shared.append])
                timed += min(verify_top, len(static[t.key].ranked))
                if ran is not None:  # the fastest measured config replaces the pick
                    verified[t.key] = config
    predicted = [(t.weight, static[t.key].predicted_seconds) for t in tasks]
    summary = {"mode": "hardware-free", "effort": effort,
               "compiled": sum(r.compiled for r in static.values()),
               "timed": timed, "predicted_ms": sum(w * s for w, s in predicted if s) * 1e3}
    return dataclasses.replace(prior, static=MappingProxyType(static),
                               verified=MappingProxyType(verified),
                               summary=MappingProxyType(summary))
