"""The tuning loop as stages: what a job asks of the machine, one request at a time.

A tuning job is a generator of ``Stage`` requests (seed 002, section 3.4): *propose* a batch
(search and cost model, CPU), *build* it (compiler workers, CPU), *measure* it (a device, one
candidate at a time) and *update* the model (CPU). The generator is sent each stage's result
and holds no resource in between, so a scheduler (``tensortune.orchestrate``) can run other
jobs' stages meanwhile. A tuple of stages is a group that may run at once (measure one part of a
batch while the next part builds); the generator is sent the tuple of their results. ``drive``
runs a job's stages one after another on one builder and one runner: the one-job use that
``TuneLoop.step`` and ``TaskScheduler.run`` are.
"""
from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any

# a tuning loop's stages: BUILD takes the compiler workers, MEASURE a device, the rest one core
PROPOSE, BUILD, MEASURE, UPDATE = "propose", "build", "measure", "update"
# a whole model's stages around its tuning (``Session``, ``service.job``), each on one core;
# stored events of earlier versions named them all "propose", which stays a valid kind
IMPORT, EXTRACT, SYNC_RECORDS, PREDICT = "import", "extract", "sync-records", "predict"
BUILD_MODEL, PACK = "build-model", "pack"
# waiting for another job (its tasks' results): holds no resource
WAIT = "wait"
KINDS = (PROPOSE, BUILD, MEASURE, UPDATE, IMPORT, EXTRACT, SYNC_RECORDS, PREDICT, BUILD_MODEL,
         PACK, WAIT)
# the ``task`` of MEASURE stages that time no new candidate: a whole model's timing, and the
# re-timing of configs measured before (``tasks.confirm``, "confirm <task>")
TIME_MODEL, CONFIRM = "time model", "confirm "


def counts_as_trials(kind: str, task: str) -> bool:
    """Whether a stage's ``size`` adds to its job's trials: a measurement of new candidates."""
    return kind == MEASURE and task != TIME_MODEL and not task.startswith(CONFIRM)


@dataclass(frozen=True)
class Stage:
    """One request: ``run`` is called with the resource's tool (a builder for ``build``, a
    runner for ``measure``, None for the CPU stages) and its return value is sent back.
    ``size`` is how many candidates it handles (0 for the CPU stages' bookkeeping)."""

    kind: str
    run: Callable[[Any], Any]
    size: int = 0
    task: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown stage kind {self.kind!r}; known: {', '.join(KINDS)}")


StageGen = Generator[Stage | tuple[Stage, ...], Any, Any]


def drive(stages: StageGen, builder=None, runner=None) -> Any:
    """Run every stage in turn on ``builder`` and ``runner``; the generator's return value."""
    tools = {BUILD: builder, MEASURE: runner}
    try:
        stage = next(stages)
        while True:
            if isinstance(stage, tuple):
                stage = stages.send(tuple(s.run(tools.get(s.kind)) for s in stage))
            else:
                stage = stages.send(stage.run(tools.get(stage.kind)))
    except StopIteration as stop:
        return stop.value


def pipeline(starts: Iterable[Callable[[], StageGen]], on_end: Callable[[int, Any], None],
             depth: int = 2) -> StageGen:
    """Run the generators that ``starts`` makes, ``depth`` at a time, each started one stage
    after the one before, so that one's measurement and the next one's build (or proposal)
    form a group that a scheduler runs at once. ``on_end(index, value)`` gets each one's return
    value as it ends; ``starts`` is drawn lazily, so a caller stops new ones by ending it."""
    starts = enumerate(starts)
    active: dict[int, tuple[StageGen, Any]] = {}  # index -> (generator, its pending item)

    def start() -> None:
        for index, make in starts:
            gen = make()
            try:
                active[index] = (gen, next(gen))
                return
            except StopIteration as stop:
                on_end(index, stop.value)

    start()
    while active:
        order = list(active)
        items = [active[i][1] for i in order]
        flat = tuple(s for item in items for s in (item if isinstance(item, tuple) else (item,)))
        sent = yield flat if len(flat) > 1 else flat[0]
        values = iter(sent if len(flat) > 1 else (sent,))
        for index, item in zip(order, items):
            gen = active[index][0]
            value = tuple(next(values) for _ in item) if isinstance(item, tuple) else next(values)
            try:
                active[index] = (gen, gen.send(value))
            except StopIteration as stop:
                del active[index]
                on_end(index, stop.value)
        if len(active) < depth:
            start()
