"""``tune_task``: the whole single-operator flow with resume from a records log."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..cost_model import MODELS
from ..cost_model import extractors as features_of
from ..measure import LocalBuilder, LocalRunner
from ..measure.types import MeasureInput, MeasureResult
from ..records import RecordWriter, load_records, records_for
from ..search import STRATEGIES, check_options
from ..settings import Settings
from ..space import task_seeds, task_space
from ..workload import Task, check_timeable
from .evaluator import BuildLimit, Evaluator
from .loop import TuneLoop, TuneResult
from .stages import StageGen, drive

# read from the registries: a tuner is a fresh cost model guiding one of the guided search
# strategies (``SEARCHES``), or a strategy that needs no model (random, grid)
MODEL_TUNERS = tuple(name for name, spec in MODELS.items() if spec.fresh)
SEARCHES = tuple(name for name, strategy in STRATEGIES.items() if strategy.guided)
TUNERS = MODEL_TUNERS + tuple(name for name, strategy in STRATEGIES.items()
                              if not strategy.guided)
COST_MODELS = ("fresh", "pretrained")


def describe(name: str) -> str:
    """The one-line summary of a tuner or search strategy name, for help texts."""
    return MODELS[name].summary if name in MODELS else STRATEGIES[name].summary


def pretrained_model(seed: int = 0, path=None, cheap_path=None):
    """The shipped cost model (``cost_model.PretrainedModel``, or the one at ``path``) and the
    features to search through: when its features compile every candidate, it comes wrapped in
    ``Prescreened`` with the shipped cheap model (``itervar`` features, also pretrained) as the
    prescreen, so the search needs no measurement to start; the second value is then None. A
    model over cheap features comes alone."""
    from ..cost_model import Prescreened
    from ..cost_model.pretrained import SHIPPED_CPU, SHIPPED_CPU_CHEAP, PretrainedModel

    model = PretrainedModel.load(path or SHIPPED_CPU, seed=seed)
    if not model.compiles:
        return model, None
    cheap = Path(cheap_path or SHIPPED_CPU_CHEAP)
    if cheap.exists():
        prescreen = PretrainedModel.load(cheap, seed=seed)
        for part in features_of.parts(model.extractor):
            if part.name == prescreen.extractor.name and type(part) is type(prescreen.extractor):
                prescreen.extractor = part  # one cache: rows the prescreen computed are reused
        return Prescreened(prescreen, model), None
    return model, "itervar"


def fresh_model(tuner: str, extractor, seed: int = 0, objective: str = "rank"):
    """An untrained cost model for a model-guided tuner name (``MODEL_TUNERS``) on ``extractor``,
    made as the registry ``cost_model.MODELS`` says: XGBoost (``objective`` rank or reg),
    GTuner, or both (``cost_model.default_ensemble``)."""
    if tuner not in MODEL_TUNERS:
        raise ValueError(f"unknown model-guided tuner {tuner!r}; choose one of "
                         f"{', '.join(MODEL_TUNERS)}")
    spec = MODELS[tuner]
    return spec.make(extractor, seed=seed, **({"objective": objective} if spec.objectives else {}))


def make_loop(tuner: str, space, settings: Settings, features: str = "knob",
              objective: str = "rank", search: str = "sa", model=None,
              prescreen: str | None = None, seeds=(), cost_model: str = "fresh") -> TuneLoop:
    """A ``TuneLoop`` for a tuner name (``TUNERS``): ``xgb`` (XGBoost), ``gtuner`` (graph
    attention network) or ``ensemble`` (both) guiding ``search`` (one of ``SEARCHES``: ``sa``
    annealing, ``ga`` genetic, ...), or model-free ``random`` / ``grid``.

    ``model`` replaces the tuner's fresh cost model, e.g. one pretrained on other tasks.
    ``prescreen`` (cheap features, e.g. ``itervar``) makes the search walk on XGBoost over those
    features and the model pick each batch from its shortlist (``cost_model.Prescreened``): the
    way to tune with features that compile every candidate (``hardware``). ``seeds`` (the
    template's starting points, ``space.task_seeds``) are measured first by the model-guided
    tuners; ``random`` and ``grid`` stay the plain baselines they are. ``cost_model``
    ``pretrained`` starts a model-guided tuner from the shipped model (``pretrained_model``),
    fine-tuned on the task's measurements, instead of a fresh one on ``features``.
    """
    from ..features import make_extractor

    if search not in SEARCHES:
        raise ValueError(f"unknown search {search!r}; choose one of {', '.join(SEARCHES)}")
    if cost_model not in COST_MODELS:
        raise ValueError(f"unknown cost model {cost_model!r}; choose one of "
                         f"{', '.join(COST_MODELS)}")
    check_options(STRATEGIES, settings.search.options)  # before any work, by name
    if tuner in MODEL_TUNERS:
        if model is None and cost_model == "pretrained":
            model, needs = pretrained_model(settings.seed)
            prescreen = prescreen or needs
        if model is None:
            model = fresh_model(tuner, make_extractor(features), settings.seed, objective)
        if prescreen:
            from ..cost_model import Prescreened

            cheap = fresh_model("xgb", make_extractor(prescreen), settings.seed, objective)
            model = Prescreened(cheap, model)
        return TuneLoop(space, STRATEGIES[search], model, settings.search, settings.seed,
                        seeds=seeds)
    if tuner in TUNERS:  # a strategy that needs no model
        if prescreen:
            raise ValueError(f"prescreen needs a model-guided tuner ({', '.join(MODEL_TUNERS)}), "
                             f"not {tuner!r}")
        return TuneLoop(space, STRATEGIES[tuner], None, settings.search, settings.seed)
    raise ValueError(f"unknown tuner {tuner!r}; choose one of {', '.join(TUNERS)}")


def tune_task(task: Task, trials: int, tuner: str = "xgb", log: str | Path | None = None,
              settings: Settings | None = None,
              callbacks: Sequence[Callable[[MeasureInput, MeasureResult], None]] = (),
              resume: bool = True, features: str = "knob",
              on_corrupt: Callable[[int, str], None] | None = None, search: str = "sa",
              model=None, prescreen: str | None = None,
              cost_model: str = "fresh", runner=None) -> TuneResult:
    """Tune ``task`` for ``trials`` new measurements, appending every one to ``log``.

    With ``resume`` the log's earlier measurements of this task are skipped and warm-start the
    cost model, so a killed run continues where it stopped. ``search`` and ``model`` are as in
    ``make_loop``, and so are ``prescreen`` and ``cost_model``. ``runner`` times the candidates
    (default: a ``LocalRunner`` on this machine; an ``RPCRunner`` for a remote device), and is
    left open for the caller.
    """
    settings = settings or Settings()
    if trials < 0:
        raise ValueError(f"trials must be >= 0, got {trials}")
    if trials and runner is None:
        check_timeable(task.target, "tune for default_target() or on a machine that can run it")
    m = settings.measure
    own_runner = runner is None
    runner = LocalRunner(m) if own_runner else runner
    try:
        with LocalBuilder(m.build_workers, m.build_timeout_s) as builder:
            return drive(tune_stages(task, trials, tuner, log, settings, callbacks, resume,
                                     features, on_corrupt, search, model, prescreen, cost_model),
                         builder, runner)
    finally:
        if own_runner:
            runner.close()


def tune_stages(task: Task, trials: int, tuner: str = "xgb", log: str | Path | None = None,
                settings: Settings | None = None,
                callbacks: Sequence[Callable[[MeasureInput, MeasureResult], None]] = (),
                resume: bool = True, features: str = "knob",
                on_corrupt: Callable[[int, str], None] | None = None, search: str = "sa",
                model=None, prescreen: str | None = None, cost_model: str = "fresh",
                name: str = "") -> StageGen:
    """``tune_task`` as stage requests (``tuner.stages``) for a scheduler that owns the
    builder and the devices; returns the ``TuneResult``."""
    settings = settings or Settings()
    space = task_space(task)
    seeds = task_seeds(task, space) if settings.search.seeds else ()
    loop = make_loop(tuner, space, settings, features, search=search, model=model,
                     prescreen=prescreen, seeds=seeds, cost_model=cost_model)
    history = []
    if log is not None and resume and Path(log).exists():
        for rec in records_for(load_records(log, on_corrupt=on_corrupt), task):
            if rec.config in space:
                history.append((rec.config, rec.to_result()))
    writer = RecordWriter(log) if log is not None else None
    try:
        cbs = ([writer.append] if writer else []) + list(callbacks)
        evaluator = Evaluator(task, None, None, trials, cbs, history,
                              verify=settings.measure.verify,
                              build_limit=BuildLimit.from_settings(settings.measure))
        return (yield from loop.run_stages(evaluator, name))
    finally:
        if writer:
            writer.close()
        # extractors that compile (hardware) hold worker processes; they restart if reused
        if loop.model is not None:
            loop.model.close()
