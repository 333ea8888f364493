"""Jobs files (``JOBS.json``) and the tuning jobs they describe, as stage generators.

``{"jobs": [{"name": "a", "kind": "tune-op", "workload": {"op": "conv2d", ...}, "trials": 64},
{"name": "b", "kind": "tune-model", "model": "resnet18" or "path.onnx", "trials": 400}]}``;
optional per job: ``priority`` (higher first), ``tuner``, ``cost_model``, ``features``. The
workload keys are those of the records (``Workload.to_dict``).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..settings import Settings
from .scheduler import Job

KINDS = ("tune-op", "tune-model")
_OPTIONAL = {"priority": int, "tuner": str, "cost_model": str, "features": str}


class JobsFileError(ValueError):
    """A jobs file that cannot be run; the message names the job and the field."""


@dataclass(frozen=True)
class JobSpec:
    name: str
    kind: str
    trials: int
    workload: dict | None = None
    model: str | None = None
    priority: int = 0
    tuner: str = "xgb"
    cost_model: str = "fresh"
    features: str = "knob"
    extra: dict = field(default_factory=dict, compare=False)

    def to_json(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if v is not None and k != "extra"}
        return d


def load_jobs(source: str | Path | dict) -> list[JobSpec]:
    """The jobs of a jobs file (a path or its parsed dict), checked field by field."""
    if isinstance(source, dict):
        data = source
    else:
        try:
            data = json.loads(Path(source).read_text())
        except FileNotFoundError:
            raise JobsFileError(f"no jobs file {source}") from None
        except json.JSONDecodeError as err:
            raise JobsFileError(f"{source} is not JSON: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list) or not data["jobs"]:
        raise JobsFileError('a jobs file is {"jobs": [...]} with at least one job')
    specs, names = [], set()
    for i, raw in enumerate(data["jobs"]):
        specs.append(_spec(i, raw))
        if specs[-1].name in names:
            raise JobsFileError(f"job {i}: the name {specs[-1].name!r} is used twice")
        names.add(specs[-1].name)
    return specs


def _spec(i: int, raw) -> JobSpec:
    from ..workload import WorkloadError, workload_from_dict

    if not isinstance(raw, dict):
        raise JobsFileError(f"job {i}: expected an object, got {type(raw).__name__}")
    name = raw.get("name")
    where = f"job {i} ({name!r})" if name else f"job {i}"
    if not isinstance(name, str) or not name.strip():
        raise JobsFileError(f"{where}: needs a non-empty string \"name\"")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise JobsFileError(f"{where}: \"kind\" must be one of {', '.join(KINDS)}, got {kind!r}")
    trials = raw.get("trials")
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise JobsFileError(f"{where}: \"trials\" must be a positive integer, got {trials!r}")
    allowed = {"name", "kind", "trials", "workload" if kind == "tune-op" else "model",
               *_OPTIONAL}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise JobsFileError(f"{where}: unknown field(s) {', '.join(unknown)} for a {kind} job")
    opts = {}
    for key, typ in _OPTIONAL.items():
        if key in raw:
            if not isinstance(raw[key], typ) or isinstance(raw[key], bool):
                raise JobsFileError(f"{where}: \"{key}\" must be a {typ.__name__}")
            opts[key] = raw[key]
    if kind == "tune-op":
        try:
            workload_from_dict(raw.get("workload") or {})
        except (WorkloadError, TypeError) as err:
            raise JobsFileError(f"{where}: bad \"workload\": {err}") from None
        return JobSpec(name, kind, trials, workload=dict(raw["workload"]), **opts)
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise JobsFileError(f"{where}: needs \"model\", a zoo name or a path to an .onnx file")
    from ..zoo import ZOO

    if model not in ZOO and not (model.endswith(".onnx") and Path(model).exists()):
        raise JobsFileError(f"{where}: model {model!r} is neither a zoo model "
                            f"({', '.join(sorted(ZOO))}) nor an existing .onnx file")
    return JobSpec(name, kind, trials, model=model, **opts)


# candidates per build or measure stage of a scheduled job: a 32-candidate build of a conv2d
# holds the build core for 5-13 s, while the device waits for the other jobs' small batches
JOB_STAGE_SIZE = 8


def make_job(spec: JobSpec, settings: Settings, out: Path, threads: int) -> Job:
    """The scheduler's ``Job`` for ``spec``: records in ``out/<name>.jsonl`` (operators) or
    under the home ``out/<name>`` (models); candidates compiled for ``threads`` threads."""
    settings = dataclasses.replace(
        settings, measure=dataclasses.replace(settings.measure, threads=threads),
        search=dataclasses.replace(settings.search, stage_size=settings.search.stage_size
                                   or JOB_STAGE_SIZE))
    if spec.kind == "tune-op":
        return Job(spec.name, lambda: _op_stages(spec, settings, out), _op_summary,
                   priority=spec.priority)
    job = Job(spec.name, lambda: None, priority=spec.priority)
    home_settings = dataclasses.replace(settings, home=out / spec.name)
    job.start = lambda: _model_stages(spec, home_settings, job.context)
    job.summarize = lambda result: _model_summary(result, job.context)
    return job


def _op_stages(spec: JobSpec, settings: Settings, out: Path):
    from ..tuner.api import tune_stages
    from ..workload import Task, default_target, workload_from_dict

    task = Task(workload_from_dict(spec.workload), default_target(settings.measure.threads))
    return tune_stages(task, spec.trials, tuner=spec.tuner, log=out / f"{spec.name}.jsonl",
                       settings=settings, features=spec.features, cost_model=spec.cost_model,
                       name=spec.name)


def _op_summary(result) -> dict:
    best = result.best_cost * 1e6 if result.best_config is not None else None
    return {"best_us": None if best is None else round(best, 3), "trials": result.trials,
            "best_config": result.best_config.to_json() if result.best_config else None,
            "errors": result.errors}


def _model_stages(spec: JobSpec, settings: Settings, holder: dict):
    from ..session import Session

    if spec.model.endswith(".onnx"):
        session = Session.from_onnx(spec.model, settings=settings)
    else:
        session = Session.from_zoo(spec.model, settings=settings)
    holder["session"] = session
    return session.tune_stages(spec.trials, tuner=spec.tuner, features=spec.features,
                               cost_model=spec.cost_model)


def _model_summary(result, holder: dict) -> dict:
    session = holder["session"]
    return {"trials": result.trials, "tasks": len(result.tasks), "run": str(session.run_dir)}


def evaluate_model(job: Job, repeat: int = 20) -> float | None:
    """A model job's tuned latency in ms (built from its records, timed in this process):
    called after the schedule, so every policy's models are timed the same way."""
    session = job.context.get("session")
    if session is None or job.state != "done":
        return None
    session.build()
    return session.evaluate(repeat=repeat)["median"]
