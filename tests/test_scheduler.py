"""Sharing a trial budget across tasks: round-robin, gradient, early stop, warm skip."""
from __future__ import annotations

import math

import pytest

from tensortune.measure import MeasureResult
from tensortune.search import STRATEGIES
from tensortune.settings import SearchSettings, Settings
from tensortune.space import task_seeds, task_space
from tensortune.tasks.scheduler import TaskScheduler
from tensortune.tuner import TuneLoop
from tensortune.workload import Matmul, Task, default_target

from tests.fakes import FakeBuilder, ReplayRunner, drive_groups

TARGET = default_target(2)
TASKS = [("a", Task(Matmul(m=64, n=64, k=64), TARGET), 1.0),
         ("b", Task(Matmul(m=32, n=64, k=16), TARGET), 1.0),
         ("c", Task(Matmul(m=16, n=16, k=16), TARGET), 1.0)]


def cost(cfg, task):
    """A synthetic timer: task 'a' is big and improvable, the others are flat."""
    base = task.workload.flops * 1e-9
    if task.workload.m == 64:
        return base * (1 + abs(math.log2(cfg["tile_j"][-1]) - 4) + abs(math.log2(cfg["tile_i"][-1]) - 2))
    return base


def make_scheduler(strategy, settings=None, **kw):
    settings = settings or Settings(search=SearchSettings(batch_size=4))
    return TaskScheduler(TASKS, FakeBuilder(), ReplayRunner(cost), settings,
                         lambda t: TuneLoop(task_space(t), STRATEGIES["random"], None,
                                            settings.search, seed=0),
                         strategy=strategy, **kw)


def test_round_robin_spreads_the_budget_evenly():
    res = make_scheduler("round-robin").run(36)
    assert res.trials == 36
    assert [res.tasks[n].trials for n in "abc"] == [12, 12, 12]
    assert res.order[:3] == ["a", "b", "c"]


def test_gradient_spends_where_weighted_gain_is_largest():
    res = make_scheduler("gradient").run(60)
    assert res.trials == 60
    counts = {n: res.tasks[n].trials for n in "abc"}
    assert counts["a"] > counts["b"] and counts["a"] > counts["c"], counts
    assert min(counts.values()) >= 4  # every task got its warm-up batch


def test_flat_tasks_stop_early_and_leave_the_budget_to_others():
    settings = Settings(search=SearchSettings(batch_size=4, early_stop_trials=8))
    res = make_scheduler("round-robin", settings).run(60)
    assert res.tasks["b"].stopped_early and res.tasks["c"].stopped_early
    assert res.tasks["b"].trials <= 12 and res.tasks["c"].trials <= 12
    assert res.tasks["a"].trials > res.tasks["b"].trials  # the improving task kept going


def test_tasks_already_tuned_are_skipped_and_history_is_not_remeasured():
    space = task_space(TASKS[1][1])
    history = {TASKS[1][1].key: [(space.get(i), MeasureResult((1e-3,))) for i in range(10)]}
    sched = make_scheduler("round-robin", history=history, well_tuned=10)
    res = sched.run(20)
    assert "already tuned" in res.skipped["b"] and res.tasks["b"].trials == 0
    assert res.tasks["b"].best_cost == pytest.approx(1e-3)  # the history still counts as best
    assert res.tasks["a"].trials + res.tasks["c"].trials == 20


def test_unknown_scheduler_is_named():
    with pytest.raises(ValueError, match="unknown task scheduler 'magic'"):
        make_scheduler("magic")


def test_under_a_stage_scheduler_the_warm_up_pipelines_tasks_one_stage_apart():
    settings = Settings(search=SearchSettings(batch_size=4, stage_size=8))
    piped, plain = make_scheduler("round-robin", settings), make_scheduler("round-robin")
    groups, res = drive_groups(piped.stages(30), piped.builder, piped.runner)
    groups = [[(s.kind, s.task) for s in g] for g in groups]
    # a measures while b proposes, and b while c does: the warm-up's groups
    assert [("measure", "b"), ("propose", "c")] in groups
    assert [("measure", "a"), ("build", "b")] in groups
    assert res.order[:3] == ["a", "b", "c"] and res.trials == 30
    # the same batches, budget and configs as run one after another
    ref = plain.run(30)
    assert {n: res.tasks[n].trials for n in "abc"} == {n: ref.tasks[n].trials for n in "abc"}
    assert {n: res.tasks[n].best_config for n in "abc"} == \
        {n: ref.tasks[n].best_config for n in "abc"}


def test_a_pipelined_warm_up_stops_when_on_step_says_so():
    settings = Settings(search=SearchSettings(batch_size=4, stage_size=8))
    res = make_scheduler("round-robin", settings).run(36, on_step=lambda p, n: p.name == "b")
    # b's end stops new batches; a was already done, c had started and is finished, not lost
    assert res.order[:2] == ["a", "b"] and res.trials <= 12


def test_a_task_another_job_holds_is_left_to_it_and_freed_when_that_job_ends():
    from tensortune.tasks.claims import SHARED, TaskClaims

    claims = TaskClaims()
    first = make_scheduler("round-robin", claims=claims.for_owner("job-1"))
    gen = first.stages(24)
    next(gen)  # job 1 started: it holds a, b and c
    assert claims.holders([t.key for _, t, _ in TASKS], "job-2") == {
        t.key: "job-1" for _, t, _ in TASKS}
    second = make_scheduler("round-robin", claims=claims.for_owner("job-2"))
    res = second.run(24)
    assert res.trials == 0  # nothing of its own to tune
    assert res.skipped == {n: SHARED + "job-1" for n in "abc"}
    assert not claims.wait([TASKS[0][1].key], "job-2", timeout_s=0.05)  # still held
    gen.close()  # job 1 cancelled: its tasks are free, a waiting job may go on
    assert claims.wait([t.key for _, t, _ in TASKS], "job-2", timeout_s=1)
    assert claims.holders([t.key for _, t, _ in TASKS], "job-2") == {}
    third = make_scheduler("round-robin", claims=claims.for_owner("job-3")).run(12)
    assert third.trials == 12 and not third.skipped


def test_confirmation_takes_the_heaviest_tasks_best_distinct_configs_and_times_them_in_turn(
        tmp_path):
    """``tasks.confirm``: the tasks making up ``confirm_share`` of weight x best cost, each
    with its ``confirm_top`` best distinct first-timed configs, built once and timed once a
    round, every timing recorded as confirming."""
    from tensortune.measure import MeasureInput
    from tensortune.records import RecordWriter, load_records
    from tensortune.tasks.confirm import candidates, confirm_stages

    spaces = {name: task_space(task) for name, task, _ in TASKS}
    costs = {"a": 8.0, "b": 1.0, "c": 1.0}  # a: 80% of the weighted latency
    path = tmp_path / "log.jsonl"
    with RecordWriter(path) as writer:
        for name, task, _ in TASKS:
            for i in range(6):
                cfg = spaces[name].get(i)
                writer.append(MeasureInput(task, cfg), MeasureResult((costs[name] + i,)))
            # a config timed twice is one candidate
            writer.append(MeasureInput(task, spaces[name].get(0)), MeasureResult((costs[name],)))
    search = SearchSettings(confirm_top=3, confirm_rounds=2, confirm_share=0.8)
    chosen = candidates(TASKS, load_records(path), search)
    assert [c.name for c in chosen] == ["a"]
    assert chosen[0].configs == tuple(spaces["a"].get(i) for i in range(3))
    assert [c.name for c in candidates(TASKS, load_records(path),
                                       SearchSettings(confirm_share=0.95))] == ["a", "b", "c"]
    assert candidates(TASKS, load_records(path), SearchSettings(confirm_rounds=0)) == []

    runner = ReplayRunner(lambda cfg: 1.0)
    with RecordWriter(path) as writer:
        groups, timed = drive_groups(
            confirm_stages(chosen, search.confirm_rounds,
                           lambda inp, res: writer.append(inp, res, confirm=True)),
            FakeBuilder(), runner)
    assert [g[0].kind for g in groups] == ["build", "measure", "measure"] and timed == 6
    confirming = [r for r in load_records(path) if r.confirm]
    assert len(confirming) == 6 and {r.config for r in confirming} == set(chosen[0].configs)


def test_tasks_of_one_space_measure_each_others_best_first():
    """Siblings (one loop nest, other epilogues): a task's new best is offered to the others
    of its space and measured in their next batch; a task of another space gets none."""
    twin = Task(Matmul(m=64, n=64, k=64), default_target(1))  # another key, a's space
    assert twin.key != TASKS[0][1].key
    assert task_space(twin).signature() == task_space(TASKS[0][1]).signature()
    assert task_space(TASKS[1][1]).signature() != task_space(TASKS[0][1]).signature()
    tasks = TASKS + [("twin", twin, 1.0)]
    settings = Settings(search=SearchSettings(batch_size=4))
    loops = {}

    def make_loop(task):
        loops[task.key] = TuneLoop(task_space(task), STRATEGIES["random"], None,
                                   settings.search, seed=len(loops))
        return loops[task.key]

    sched = TaskScheduler(tasks, FakeBuilder(), ReplayRunner(cost), settings, make_loop,
                          strategy="round-robin")
    res = sched.run(48)
    a, b, t = (next(p for p in sched.progress if p.name == n) for n in ("a", "b", "twin"))
    assert [p.name for p in a.siblings] == ["twin"] and [p.name for p in t.siblings] == ["a"]
    assert b.siblings == []
    # each measured the other's best, so both end at the better of the two
    assert a.evaluator.best_config in t.evaluator.measured
    assert t.evaluator.best_config in a.evaluator.measured
    assert res.tasks["a"].best_cost == pytest.approx(res.tasks["twin"].best_cost)
    assert not set(b.evaluator.measured) & set(a.evaluator.measured)


def test_an_offered_config_is_measured_before_the_seeds_and_only_once():
    task = TASKS[0][1]
    space = task_space(task)
    *seeds, offered = task_seeds(task, space)[:4]
    loop = TuneLoop(space, STRATEGIES["random"], None, SearchSettings(batch_size=4), seeds=seeds)
    loop.offer([offered, offered, seeds[1]])
    from tensortune.tuner.evaluator import Evaluator
    ev = Evaluator(task, FakeBuilder(), ReplayRunner(cost), budget=100)
    loop.step(ev, 3)
    assert list(ev.results)[:3] == [offered, seeds[1], seeds[0]]
    loop.step(ev, 2)
    assert list(ev.results)[3] == seeds[2]  # seeds[1] was measured as an offer
    assert len(ev.results) == 5 and not loop.offered and not loop.seeds
