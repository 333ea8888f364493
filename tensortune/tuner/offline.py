"""Tuning for a device this process cannot reach: propose and build a batch now, time it later.

``propose_batch`` is one round of the tuning loop cut at the measurement: the tuner resumes
from a records log (the results imported from earlier batches train its cost model), proposes,
builds, records what failed to build, and returns the built candidates for export
(``measure.cuda_export``). ``python -m tensortune.device_runner`` times them where the GPU is
and ``tensortune measure import`` appends the results to the log, so the next round learns from
them, exactly as ``tune_task`` resumes a killed run.

``model_batch`` is a round over all tasks of one or more models: a task nothing was measured of
yet gets the configs the shipped CUDA cost model (what hardware-free tuning ranks with) ranks
best among a pool of built random ones, the others ``propose_batch``; a total budget is split
by each task's share of the model's time (its best measured, else a roofline estimate).
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..cost_model.base import as_cost_model
from ..measure.types import BuildResult, ErrorKind, MeasureInput, MeasureResult
from ..records import RecordWriter, load_records, records_for
from ..settings import Settings
from ..space import task_seeds, task_space
from ..workload import Task
from .api import make_loop
from .evaluator import BuildLimit, Evaluator
from .stages import BUILD, MEASURE

# proposals per round at most: most configs of a GPU space break a per-block limit, so a round
# may propose several times to fill its batch with ones that build
MAX_PROPOSALS = 30


class _Held:
    """A runner that times nothing: it keeps the batch that reached the measurement."""

    def __init__(self):
        self.inputs: list = []
        self.builds: list = []

    def run(self, inputs, builds, verify=None):
        self.inputs, self.builds = list(inputs), list(builds)
        return [MeasureResult((), ErrorKind.DEVICE_ERROR, "held for export")] * len(inputs)


def propose_batch(task: Task, n: int, log: str | Path, builder, tuner: str = "xgb",
                  features: str = "knob", settings: Settings | None = None,
                  search: str = "sa", exclude: Collection = ()
                  ) -> list[tuple[MeasureInput, BuildResult]]:
    """Up to ``n`` new built candidates of ``task`` that ``tuner`` picks after learning from
    ``log``, none of ``exclude``; candidates that fail to build are appended to ``log`` as
    errors (never proposed again) and do not count towards ``n``."""
    settings = settings or Settings()
    # one proposal for the whole batch, built in one piece
    search_settings = dataclasses.replace(settings.search, batch_size=n, stage_size=0)
    settings = dataclasses.replace(settings, search=search_settings)
    space = task_space(task)
    seeds = task_seeds(task, space) if settings.search.seeds else ()
    loop = make_loop(tuner, space, settings, features, search=search, seeds=seeds)
    history = []
    if Path(log).exists():
        history = [(r.config, r.to_result()) for r in records_for(load_records(log), task)
                   if r.config in space]
    out: list[tuple[MeasureInput, BuildResult]] = []
    with RecordWriter(log) as writer:
        evaluator = Evaluator(task, builder, None, budget=n * MAX_PROPOSALS,
                              callbacks=[writer.append], history=history,
                              build_limit=BuildLimit.from_settings(settings.measure))
        evaluator.pending.update(exclude)
        for _ in range(MAX_PROPOSALS):
            if len(out) >= n or loop.exhausted:
                break
            held = _held_batch(loop, evaluator, builder, n - len(out))
            if held is None:
                break
            failed = [(i, b) for i, b in zip(*held) if b.error is not ErrorKind.NONE]
            evaluator.record([i for i, _ in failed],
                             [MeasureResult((), b.error, b.message, build_s=b.build_s,
                                            timestamp=time.time()) for _, b in failed])
            for inp, build in zip(*held):
                if build.error is ErrorKind.NONE:
                    evaluator.pending.add(inp.config)
                    out.append((inp, build))
    if loop.model is not None:  # the feature workers are not needed while the batch runs
        loop.model.close()
        if loop.model.prescreen is not None:
            loop.model.prescreen.close()
    return out


def _held_batch(loop, evaluator: Evaluator, builder, n: int):
    """Run one step of ``loop`` up to its measurement; (inputs, builds) or None if it proposed
    nothing."""
    gen = loop.stages(evaluator, n)
    held = _Held()
    try:
        stage = next(gen)
        while stage.kind != MEASURE:
            stage = gen.send(stage.run(builder if stage.kind == BUILD else None))
    except StopIteration:
        return None
    stage.run(held)
    gen.close()  # the step ends here: nothing is recorded for the held candidates
    return held.inputs, held.builds


def best_batch(task: Task, k: int, log: str | Path,
               builder) -> list[tuple[MeasureInput, BuildResult]]:
    """The ``k`` fastest configs of ``task`` in ``log``, rebuilt: to time them again (another
    GPU, a final comparison beside other libraries)."""
    ranked = sorted((r for r in records_for(load_records(log), task) if r.ok),
                    key=lambda r: r.cost) if Path(log).exists() else []
    inputs = [MeasureInput(task, r.config) for r in ranked[:k]]
    builds = builder.build(inputs) if inputs else []
    return [(i, b) for i, b in zip(inputs, builds) if b.error is ErrorKind.NONE]


# round 1 builds this many times a fresh task's count of random configs and keeps those the
# shipped model ranks best: the rows it ranks by come with each build (``cuda_build``), so
# nothing is compiled twice (its own search compiled ~50 configs a task, ~15 of them valid)
FIRST_POOL = 2.0
FIRST_VALID = 0.35  # the share of a CUDA space's random configs that build, until one is seen
FIRST_TRIES = 4  # sampling rounds to fill a task's pool
# a task whose configs build this rarely stops at its count: on ResNet-18's Winograd outputs
# (one in ten built, a third of the rest timed out) the last tenth of the pools took half the
# time of the first models' round
FIRST_RARE = 0.15
# a pool's build limit: a CUDA build runs TVM and nvcc twice (2-4 s on a busy 2-core host);
# random configs meet unrolled giants, which would hold a worker for minutes (on the models'
# first pools, one timed out at 12 s for every five that built, and took a third of the time)
FIRST_BUILD_S = 8.0
FIRST_CHUNK = 96  # pool builds per builder call (progress is reported after each)
# the estimate of a fresh task's time for a budget's split: a GPU's FP32 roofline (H100-ish)
ROOFLINE_FLOPS, ROOFLINE_BYTES_S = 50e12, 3e12


@dataclass(frozen=True)
class TaskRound:
    """One task's part of a model round: its built candidates and how they were chosen
    (``pretrained``: the shipped model's best of a built pool, ``random`` for what that
    lacked, or the tuner's name); its share of the time, the seconds that rests on and their
    ``basis`` (``measured``: its best record, ``roofline``: an estimate); the shipped model's
    ``predicted`` seconds of its first pick (round 1)."""

    task: Task
    weight: int
    items: tuple
    chosen: str
    share: float
    seconds: float
    basis: str
    predicted: float | None = None


def allocate(shares: list[float], total: int, floor: int = 1) -> list[int]:
    """``total`` candidates split by ``shares``: each task ``floor`` (fewer only where the
    total does not cover them), the rest in proportion (largest remainders round up)."""
    n = len(shares)
    if n == 0:
        return []
    floor = min(floor, total // n)
    counts = [floor] * n
    rest = total - floor * n
    weights = [max(0.0, s) if math.isfinite(s) else 0.0 for s in shares]
    if sum(weights) <= 0:
        weights = [1.0] * n
    exact = [rest * w / sum(weights) for w in weights]
    for i, x in enumerate(exact):
        counts[i] += int(x)
    order = sorted(range(n), key=lambda i: (-(exact[i] - int(exact[i])), -weights[i]))
    for i in order[:total - sum(counts)]:
        counts[i] += 1
    return counts


def roofline_seconds(task: Task) -> float:
    """A GPU's time for ``task`` if it ran at the FP32 roofline: FLOPs or bytes moved."""
    wl = task.workload
    shapes = list(wl.input_shapes)
    with contextlib.suppress(Exception):  # a function of several outputs: inputs only
        shapes.append(wl.output_shape)
    moved = 4.0 * sum(float(math.prod(s)) for s in shapes)
    return max(_flops(task) / ROOFLINE_FLOPS, moved / ROOFLINE_BYTES_S, 1e-9)


def model_batch(tasks: list[tuple[Task, int]], log: str | Path, builder, settings: Settings,
                per_task: int = 16, budget: int | None = None, tuner: str = "xgb",
                features: str = "knob", search: str = "sa", model=None,
                pool: float = FIRST_POOL,
                on_task: Callable[[TaskRound], None] | None = None,
                progress: Callable[[str], None] | None = None) -> list[TaskRound]:
    """One round of ``(task, weight)``s (a model's tunable tasks): ``per_task`` new built
    candidates each, or ``budget`` in all split by each task's share of the time (its best
    record, else its roofline estimate; each task at least a quarter of an even split). A
    task without an error-free record gets the best ``model`` ranks of ``pool`` times its
    count of built random configs (default model: the shipped one for the target's arch,
    ``cost_model.pretrained.cuda_model``); one with records goes through ``propose_batch``
    with ``tuner``. Build failures are appended to ``log``; ``progress`` hears how the pools
    fill."""
    records = load_records(log) if Path(log).exists() else []
    known = [records_for(records, t) for t, _ in tasks]
    best = [min((r.cost for r in rs if r.ok), default=None) for rs in known]
    seconds = [b if b is not None else roofline_seconds(t) for b, (t, _) in zip(best, tasks)]
    times = [w * s for (_, w), s in zip(tasks, seconds)]
    shares = [t / sum(times) for t in times] if tasks else []
    counts = [per_task] * len(tasks) if budget is None else \
        allocate(shares, budget, max(1, budget // (4 * max(1, len(tasks)))))
    fresh = [i for i, b in enumerate(best) if b is None and counts[i] > 0]
    picks, predicted = _first_round(tasks, fresh, counts, known, log, builder, settings,
                                    model, pool, progress) if fresh else ({}, {})
    out = []
    for i, (task, weight) in enumerate(tasks):
        mine = picks.get(i, [])
        chosen = "pretrained" if i in picks else tuner
        if len(mine) < counts[i]:  # what the pool lacked (or everything, for a known task)
            more = propose_batch(task, counts[i] - len(mine), log, builder,
                                 "random" if i in fresh else tuner, features, settings, search,
                                 exclude={inp.config for inp, _ in mine})
            if more and i in fresh:
                chosen = "pretrained+random" if mine else "random"
            mine = mine + more
        result = TaskRound(task, weight, tuple(mine), chosen, shares[i], seconds[i],
                           "roofline" if best[i] is None else "measured", predicted.get(i))
        if on_task:
            on_task(result)
        out.append(result)
    return out


class _BuiltRows:
    """The ``hardware_cuda`` rows the builds wrote beside their cubins, as the shipped model's
    extractor: it ranks built candidates without compiling them again."""

    name = "hardware_cuda"

    def __init__(self, rows: dict):
        self.rows = rows

    def extract(self, inputs) -> np.ndarray:
        return np.asarray([self.rows[(i.task.key, i.config)] for i in inputs], dtype=np.float32)


def _first_round(tasks, fresh: list[int], counts: list[int], known: list, log, builder,
                 settings: Settings, model, pool: float, progress=None) -> tuple[dict, dict]:
    """Each fresh task's ``counts[i]`` best predicted of ``pool`` x as many built random
    configs (``{i: [(input, build)]}``, best first) and its first pick's predicted seconds.
    All tasks' samples go to the builder together, in a few rounds until each pool is full;
    configs that fail to build go to ``log``."""
    from ..cost_model.pretrained import cuda_model
    from ..measure.cuda_build import launch_spec

    rng = np.random.default_rng(settings.seed)
    want = {i: max(counts[i], math.ceil(pool * counts[i])) for i in fresh}
    spaces = {i: task_space(tasks[i][0]) for i in fresh}
    tried = {i: {r.config for r in known[i]} for i in fresh}
    # the template's own starting points (cuda.gemm's near-cuBLAS tiles) go first into each
    # pool, and up to a third of the picks are kept for them whatever the model ranks
    seeded = {i: task_seeds(tasks[i][0], spaces[i]) if settings.search.seeds else []
              for i in fresh}
    seeds = {i: [c for c in seeded[i] if c not in tried[i]] for i in fresh}
    for i in fresh:
        tried[i].update(seeds[i])
    built: dict[int, list] = {i: [] for i in fresh}
    rate, sent = dict.fromkeys(fresh, FIRST_VALID), dict.fromkeys(fresh, 0)
    failed, start = 0, time.perf_counter()

    def full(i: int) -> bool:  # a rare builder stops at its count
        rare = sent[i] >= 20 and len(built[i]) < FIRST_RARE * sent[i]
        return len(built[i]) >= (counts[i] if rare else want[i])

    with RecordWriter(log) as writer:
        for _ in range(FIRST_TRIES):
            queues = {}
            for i in fresh:
                need = want[i] - len(built[i])
                if not full(i):  # twice what the task's rate so far says: the rest is skipped
                    configs = spaces[i].sample_many(min(20 * need, math.ceil(2 * need / rate[i])),
                                                    rng, tried[i])
                    tried[i].update(configs)
                    queues[i] = collections.deque(seeds.pop(i, []) + configs)
            while queues:
                chunk, owner = [], []
                while queues and len(chunk) < FIRST_CHUNK:  # the tasks in turn
                    for i in list(queues):
                        if full(i) or not queues[i]:
                            del queues[i]
                        elif len(chunk) < FIRST_CHUNK:
                            chunk.append(MeasureInput(tasks[i][0], queues[i].popleft()))
                            owner.append(i)
                            sent[i] += 1
                for i, inp, build in zip(owner, chunk, builder.build(chunk, FIRST_BUILD_S)):
                    if build.error is ErrorKind.NONE:
                        built[i].append((inp, build))
                    else:
                        failed += 1
                        writer.append(inp, MeasureResult((), build.error, build.message,
                                                         build_s=build.build_s,
                                                         timestamp=time.time()))
                if progress and chunk:
                    progress(f"pools: {sum(map(len, built.values()))} of {sum(want.values())} "
                             f"built, {failed} failed, {time.perf_counter() - start:.0f} s")
            rate = {i: max(0.02, len(built[i]) / sent[i]) if sent[i] else rate[i]
                    for i in fresh}
    arch = str(tasks[fresh[0]][0].target.get("arch", "sm_90"))
    model = model if model is not None else cuda_model(arch, settings.seed)
    scale = as_cost_model(model).label_scale  # a test's stand-in declares none
    own, model.extractor = model.extractor, _BuiltRows({
        (inp.task.key, inp.config): launch_spec(b.path)["hardware_cuda"]
        for i in fresh for inp, b in built[i]})
    picks, predicted = {}, {}
    try:
        for i in (i for i in fresh if built[i]):
            scores = np.asarray(model.predict([inp for inp, _ in built[i]]), dtype=float)
            ranked = list(np.argsort(-scores, kind="stable"))
            kept = [j for j in ranked if built[i][j][0].config in seeded[i]][:counts[i] // 3]
            order = kept + [j for j in ranked if j not in kept][:counts[i] - len(kept)]
            picks[i] = [built[i][j] for j in order]
            flops = _flops(tasks[i][0])
            if scale and flops and scores[order[0]] > 0:
                predicted[i] = flops / (scores[order[0]] * scale * 1e12)
    finally:
        model.extractor = own
    return picks, predicted


def _flops(task: Task) -> float:
    try:
        return float(task.workload.flops)
    except Exception:  # estimate_tir_flops refuses some functions that only move data
        return 0.0
