"""Hardware-free tuning (Tuna, seed 001): each task's config from a pretrained model's
predictions, with nothing run on the target.

Evolution strategies (``search.evolution``) walk the task's space on the cheap model's scores
(``itervar`` features: the schedule is lowered, not compiled), starting from the template's seed
configs; the ``shortlist`` best distinct configs they meet, and the seeds, are then compiled and
ranked by the costly model (hardware features of the generated assembly). The result ranks
them by predicted throughput; ``compiled`` counts the candidates compiled for features.
"""
from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..cost_model import extractors as features_of
from ..cost_model.base import CostModel, as_cost_model
from ..measure.types import MeasureInput
from ..settings import Settings
from ..space import Config, InvalidConfigError, apply_config, task_seeds, task_space
from ..workload import Task


@dataclass(frozen=True)
class StaticResult:
    """Configs of ``task`` ranked by the model, best first, with predicted TFLOP/s (None when
    the model predicts a score, not a throughput)."""

    task: Task
    ranked: tuple[tuple[Config, float | None], ...]
    compiled: int
    seconds: float

    @property
    def best(self) -> Config | None:
        return self.ranked[0][0] if self.ranked else None

    @property
    def predicted_seconds(self) -> float | None:
        """The best config's predicted time per call."""
        if not self.ranked or not self.ranked[0][1]:
            return None
        return float(self.task.workload.flops) / (self.ranked[0][1] * 1e12)


# a small search (at most these ``es`` options): the cheap features still lower every
# candidate (about 10 ms each), and the seeds it starts from are good already
STATIC_ES = {"starts": 4, "population": 8, "generations": 6}
# smaller still where the only model compiles each candidate (nvcc for a GPU: ~0.5 s each)
COSTLY_ES = {"starts": 2, "population": 8, "generations": 3}


EFFORTS = ("full", "fast")
FAST_COMPILED = 4  # ``fast``: the seeds the cheap model ranks best, compiled for the costly one
# ``fast`` with the tasks' weights: the tasks beyond this share of the model's estimated time
# (largest first) have two compiled
FAST_SHARE, FAST_MINOR_COMPILED = 0.9, 2
# the estimate: a roofline of this many FLOP per byte moved (a small CPU's ridge, about), so
# that a depthwise layer's memory traffic counts and not only its few FLOPs
RIDGE_FLOP_PER_BYTE = 10.0


def predict_best(task: Task, model, settings: Settings, shortlist: int = 16,
                 seed: int = 0, effort: str = "full") -> StaticResult:
    """Rank configs of ``task`` by ``model`` (a ``PretrainedModel``, or one wrapped in
    ``Prescreened`` with a cheap one) without running any; see the module docstring.
    ``effort="fast"`` searches nothing: the template's seeds, ranked by the cheap model, the
    best few compiled and ranked by the costly one (where the function computes at all)."""
    return next(predict_many([task], model, settings, shortlist, seed, effort))


def predict_many(tasks, model, settings: Settings, shortlist: int = 16, seed: int = 0,
                 effort: str = "full", batch: int = 16,
                 weights=None) -> Iterator[StaticResult]:
    """``predict_best`` of each of ``tasks``, in order. The costly model ranks the candidates of
    several tasks in one call (at least ``batch`` of them): its features compile each one in
    worker processes, and ``fast``'s few a task left one of two workers idle half the time.
    With ``weights`` (each task's calls per inference), ``fast`` compiles fewer candidates for
    the tasks outside ``FAST_SHARE`` of the estimated time (``compile_counts``)."""
    if effort not in EFFORTS:
        raise ValueError(f"unknown effort {effort!r}; choose one of {', '.join(EFFORTS)}")
    model = as_cost_model(model)
    tasks = list(tasks)
    counts = compile_counts(tasks, weights) if weights is not None and effort == "fast" \
        else [FAST_COMPILED] * len(tasks)

    def results():
        # a batch's candidates compile in the background while the next tasks are shortlisted
        # (the cheap model, in this process): the compile workers no longer wait for them
        with ThreadPoolExecutor(1, thread_name_prefix="tensortune-compile") as background:
            pending: list[_Shortlist] = []
            queued = None
            for task, k in zip(tasks, counts, strict=True):
                pending.append(_shortlist(task, model, settings, shortlist, seed, effort, k))
                if sum(len(p.candidates) for p in pending if p.scores is None) >= batch:
                    ready, queued = queued, (pending, _compile_soon(background, pending, model))
                    pending = []
                    if ready:
                        yield from _rank(*ready, model)
            last = (pending, _compile_soon(background, pending, model))
            if queued:
                yield from _rank(*queued, model)
            yield from _rank(*last, model)

    return results()


def compile_counts(tasks, weights) -> list[int]:
    """Candidates ``fast`` compiles per task: ``FAST_COMPILED`` for the tasks that, largest
    first, make up ``FAST_SHARE`` of the estimated time (weight x roofline time), fewer for
    the rest."""
    times = []
    for task, w in zip(tasks, weights, strict=True):
        wl = task.workload
        shapes = list(wl.input_shapes)
        with contextlib.suppress(Exception):  # a function of several outputs: inputs only
            shapes.append(wl.output_shape)
        moved = 4.0 * sum(float(np.prod(s)) for s in shapes)
        times.append(w * max(float(wl.flops) / RIDGE_FLOP_PER_BYTE, moved))
    total, covered = sum(times), 0.0
    counts = [FAST_MINOR_COMPILED] * len(tasks)
    for i in sorted(range(len(tasks)), key=lambda i: -times[i]):
        if covered >= FAST_SHARE * total:
            break
        counts[i], covered = FAST_COMPILED, covered + times[i]
    return counts


@dataclass
class _Shortlist:
    task: Task
    candidates: list
    scores: np.ndarray | None  # set when one model both searched and ranked
    compiled: int
    seconds: float
    scale: float | None = None  # of ``scores`` when they are the cheap model's
    ordered: bool = False  # the candidates are in their final order already


def _shortlist(task: Task, model: CostModel, settings: Settings, shortlist: int, seed: int,
               effort: str, compiled_at_most: int = FAST_COMPILED) -> _Shortlist:
    """The candidates the cheap model leaves for the costly one to rank: the template's seeds
    and (``full``, or a template without seeds) what the evolutionary search finds."""
    start = time.perf_counter()
    space = task_space(task)
    seeds = task_seeds(task, space) if settings.search.seeds else ()
    cheap, costly = model.prescreen or model, model.costly
    scorer = _Scorer(task, cheap, space)
    found = _search(space, scorer, settings, shortlist, seed, seeds, costly is cheap) \
        if effort == "full" or not seeds else []
    candidates = list(dict.fromkeys([*seeds, *found]))
    if effort == "fast" and costly is not cheap:
        return _fast(task, candidates, scorer, compiled_at_most, start)
    candidates = [c for c in candidates if scorer.valid(c)]
    scores, compiled = None, 0
    if candidates and costly is cheap:  # one model: it compiled what it scored if it compiles
        scores = scorer.score(candidates)
        compiled = len(scorer.scored) if cheap.compiles else 0
    return _Shortlist(task, candidates, scores, compiled, time.perf_counter() - start)


class _Scorer:
    """The cheap model's scores of one task's configs, and the check that a config builds."""

    def __init__(self, task: Task, cheap: CostModel, space):
        self.task, self.cheap, self.space = task, cheap, space
        self.scored: set = set()
        # through the prescreen's schedules where it keeps them (the features share them), so
        # the template is not applied once more for the check
        self.check = features_of.schedule_check(cheap.extractor)

    def score(self, configs) -> np.ndarray:
        self.scored.update(configs)
        return np.asarray(self.cheap.predict([MeasureInput(self.task, c) for c in configs]),
                          dtype=float)

    def valid(self, config) -> bool:
        if self.check:
            return self.check(MeasureInput(self.task, config)) is not None
        return _valid(self.task, config, self.space)


def _search(space, scorer: _Scorer, settings: Settings, shortlist: int, seed: int, seeds,
            one_model: bool) -> list:
    """``shortlist`` configs of the evolutionary search on the cheap model (smaller when that
    model also ranks: each of its scores compiles)."""
    from ..search.evolution import STRATEGY as ES, evolve

    limits = COSTLY_ES if one_model else STATIC_ES
    current = ES.values(settings.search)
    search = ES.configure(settings.search, **{k: min(v, current[k]) for k, v in limits.items()})
    return evolve(space, scorer.score, shortlist, frozenset(), np.random.default_rng(seed),
                  search, seeds)


def _fast(task: Task, candidates: list, scorer: _Scorer, compiled_at_most: int,
          start: float) -> _Shortlist:
    """``fast`` with two models: the cheap one's best ``compiled_at_most``, one register tile
    at a time, for the costly one to rank."""
    if not candidates:
        return _Shortlist(task, [], None, 0, time.perf_counter() - start)
    ranked = scorer.score(candidates)
    scale, ordered = None, False
    if task.workload.flops:
        order = _diverse(candidates, ranked, len(candidates))
    else:
        # moving data only (a transpose): the models learned throughput and cannot rank it,
        # so nothing is compiled and the row-wise template's own seed order stands (its first
        # seed picks the rows that give every core work: ``rowwise_seeds``)
        order = list(range(len(candidates)))
        scale, ordered = scorer.cheap.label_scale, True
    # checked on the first few only: checking every seed cost as much as scoring it
    order = list(itertools.islice((i for i in order if scorer.valid(candidates[i])),
                                  compiled_at_most))
    return _Shortlist(task, [candidates[i] for i in order], ranked[order] if ordered else None,
                      0, time.perf_counter() - start, scale, ordered)


def _diverse(candidates, scores: np.ndarray, k: int) -> list[int]:
    """``k`` of the best by ``scores``, taken in turn from each register tile (its best
    variant first): the cheap model misjudges whole tiles against each other (it rated a ragged
    29-lane tile of seven rows 2.5x faster than one of two rows and four lanes, which ran 5x
    faster), and the costly model sorts them."""
    groups: dict = {}
    for i in np.argsort(-scores, kind="stable"):
        groups.setdefault(_register_tile(candidates[i]), []).append(int(i))
    turns = [g[j] for j in range(k) for g in groups.values() if j < len(g)]
    return turns[:k]


def _register_tile(config) -> tuple:
    """The vectorized axis and the innermost split of every spatial axis (a tiled config)."""
    return (config.get("vector_axis"),
            *((name, v[-1]) for name, v in config.items() if name.startswith("tile_")
              and isinstance(v, tuple) and len(v) == 4))


def _unranked(pending: list[_Shortlist]) -> list[MeasureInput]:
    return [MeasureInput(p.task, c) for p in pending if p.scores is None for c in p.candidates]


def _compile_soon(background: ThreadPoolExecutor, pending: list[_Shortlist],
                  model: CostModel) -> Future:
    """The rows of the costly model's compiling features (``compile_in``) for ``pending``'s
    candidates, computed in ``background``; its result is the seconds that took. Only that
    thread touches those extractors until the rows are in their caches."""
    inputs = _unranked(pending)

    def rows() -> float:
        start = time.perf_counter()
        for extractor in _compiling(model) if inputs else ():
            extractor.extract(inputs)
        return time.perf_counter() - start

    return background.submit(rows)


def _rank(pending: list[_Shortlist], compiled: Future,
          model: CostModel) -> Iterator[StaticResult]:
    """Each shortlist ranked by the costly model, all in one ``predict`` call, once
    ``compiled`` (``_compile_soon``) has put their compiled rows in the extractors' caches."""
    costly = model.costly
    elapsed = compiled.result()
    start = time.perf_counter()
    inputs = _unranked(pending)
    all_scores = iter(np.asarray(costly.predict(inputs), dtype=float) if inputs else ())
    share = (elapsed + time.perf_counter() - start) / max(1, len(inputs))
    for p in pending:
        if p.scores is None:
            p.scores = np.asarray([next(all_scores) for _ in p.candidates], dtype=float)
            p.compiled, p.seconds = len(p.candidates), p.seconds + share * len(p.candidates)
        scale = p.scale or costly.label_scale
        order = range(len(p.candidates)) if p.ordered else np.argsort(-p.scores, kind="stable")
        ranked = tuple((p.candidates[i], float(p.scores[i]) * scale if scale else None)
                       for i in order)
        yield StaticResult(p.task, ranked, p.compiled, p.seconds)


@contextlib.contextmanager
def shipped_model(settings: Settings, model=None):
    """The shipped cost model (or ``model``) for hardware-free picks, its compiling features in
    ``build_workers`` processes, which are stopped on exit."""
    if model is None:
        from .api import pretrained_model

        model, _ = pretrained_model(settings.seed)
    compile_in(model, settings.measure.build_workers)
    try:
        yield model
    finally:
        close(model)


def time_top(result: StaticResult, k: int, builder, runner, callbacks=()):
    """Time the ``k`` best predicted configs of ``result``'s task; returns the fastest that ran
    and its ``MeasureResult``, or the predicted best and None when none ran."""
    from .evaluator import Evaluator

    top = [c for c, _ in result.ranked[:k]]
    measured = Evaluator(result.task, builder, runner, len(top), list(callbacks)).evaluate(top)
    ok = [(c, r) for c, r in measured if r.ok]
    return min(ok, key=lambda cr: cr[1].cost) if ok else (result.best, None)


def compile_in(model, workers: int) -> None:
    """Let ``model``'s compiling features (``hardware``) use ``workers`` processes, started in
    the background now: while hardware-free tuning nothing else needs the cores."""
    for ex in _compiling(as_cost_model(model)):
        ex.workers = max(1, workers)
        ex.warm()


def _compiling(model: CostModel) -> list:
    """The extractors of ``model``'s costly features that compute in worker processes."""
    return features_of.compiling(model.costly.extractor)


def close(model) -> None:
    """Stop the worker processes of ``model``'s extractors (and its prescreen's)."""
    as_cost_model(model).close()


def _valid(task: Task, config: Config, space) -> bool:
    """Whether the template accepts ``config`` (its own limits, e.g. register tile size)."""
    try:
        apply_config(task, config, space)
        return True
    except InvalidConfigError:
        return False
