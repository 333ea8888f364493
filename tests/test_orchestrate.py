"""The multi-job scheduler with fake stages (sleeps) and fake tools: interleaving, exclusive
devices, policies, priorities, jobs added mid-run, devices that go away, exact budgets."""
from __future__ import annotations

import threading
import time

import pytest

from tensortune.measure.rpc_runner import DeviceUnavailable
from tensortune.orchestrate import Job, StageScheduler
from tensortune.orchestrate.devices import Device, DeviceSpec, Layout
from tensortune.tuner.stages import BUILD, EXTRACT, MEASURE, PROPOSE, UPDATE, Stage

from .fakes import FakeBuilder, ReplayRunner


class FakeResources:
    """One build core and the given devices; tools that record who used them."""

    def __init__(self, devices=("cores:1",), cpu=1, exclusive=False):
        self.cpu_capacity = cpu
        self.builder = FakeBuilder()
        self.layout = Layout(tuple(range(cpu)), tuple((DeviceSpec.parse(d), ()) for d in devices))
        self.devices = [Device(d, ReplayRunner(lambda c: 1e-3), exclusive_cpu=exclusive)
                        for d in devices]
        self.private = 0

    def private_tools(self):
        self.private += 1
        return FakeTool(), FakeTool()


class FakeTool:
    closed = False

    def close(self):
        self.closed = True


def fake_job(name, rounds=3, propose=0.02, build=0.04, measure=0.04, size=4, priority=0,
             log=None):
    """A job of ``rounds`` batches; each stage sleeps, a measure stage returns its tool."""
    def stages():
        measured = 0
        for _ in range(rounds):
            yield Stage(PROPOSE, lambda _: time.sleep(propose), size)
            yield Stage(BUILD, lambda b: time.sleep(build), size)
            tool = yield Stage(MEASURE, lambda r: (time.sleep(measure), r.run([], []), r)[2], size)
            if log is not None:
                log.append((name, tool))
            measured += size
            yield Stage(UPDATE, lambda _: None)
        return measured
    return Job(name, stages, lambda measured: {"trials": measured}, priority=priority)


def overlaps(events):
    events = sorted(events, key=lambda e: e.start)
    return any(b.start < a.end - 1e-6 for a, b in zip(events, events[1:]))


def run(policy, jobs, resources=None, **kw):
    sched = StageScheduler(resources or FakeResources(), policy, pin=False, **kw)
    for job in jobs:
        sched.submit(job)
    return sched.run()


def test_load_aware_interleaves_builds_and_measurements_and_keeps_devices_exclusive():
    report = run("load-aware", [fake_job(f"j{i}") for i in range(4)])
    assert all(j.state == "done" and j.summary["trials"] == 12 for j in report.jobs)
    device = [e for e in report.events if e.resource == "cores:1"]
    assert len(device) == 12 and all(e.kind == MEASURE for e in device)
    assert not overlaps(device)  # one measurement at a time on a device
    cpu = [e for e in report.events if e.resource == "cpu"]
    assert {e.kind for e in cpu} == {PROPOSE, BUILD, UPDATE}  # builds never on the device
    assert not overlaps(cpu)  # one build core: its stages never overlap either
    # some job measured while another built: the point of interleaving
    assert any(a.start < b.end and b.start < a.end for a in device for b in cpu
               if a.job != b.job)
    assert 0.5 < report.busy["cores:1"] <= 1.0 and 0.5 < report.busy["cpu"] <= 1.0


def test_sequential_runs_one_job_after_another_and_takes_longer():
    seq = run("sequential", [fake_job(f"j{i}") for i in range(4)])
    load = run("load-aware", [fake_job(f"j{i}") for i in range(4)])
    spans = {}
    for e in seq.events:
        lo, hi = spans.get(e.job, (e.start, e.end))
        spans[e.job] = (min(lo, e.start), max(hi, e.end))
    ordered = sorted(spans.values())
    assert all(a[1] <= b[0] + 1e-6 for a, b in zip(ordered, ordered[1:]))
    assert [j.summary["trials"] for j in seq.jobs] == [12] * 4
    assert load.makespan_s < 0.85 * seq.makespan_s


def test_concurrent_gives_every_job_its_own_tools_and_waits_for_nothing():
    res = FakeResources()
    report = run("concurrent", [fake_job(f"j{i}") for i in range(3)], res)
    assert res.private == 3
    assert {e.resource for e in report.events} == {"job:j0", "job:j1", "job:j2"}
    measures = [e for e in report.events if e.kind == MEASURE]
    assert overlaps(measures)  # the interference the other policies prevent


def test_priority_goes_first_and_a_local_device_waits_for_an_idle_cpu():
    res = FakeResources(devices=("local",), cpu=1, exclusive=True)
    report = run("load-aware", [fake_job("low"), fake_job("high", priority=5)], res)
    first = min(report.events, key=lambda e: e.start)
    assert first.job == "high"
    cpu = [e for e in report.events if e.resource == "cpu"]
    dev = [e for e in report.events if e.resource == "local"]
    # on a device that shares the CPU, no stage runs while it times
    assert not any(a.start < b.end - 1e-6 and b.start < a.end - 1e-6 for a in cpu for b in dev)


def test_an_idle_device_gets_the_build_before_a_fairer_jobs_long_proposal():
    def job(name, first):
        def stages():
            yield Stage(first, lambda _: time.sleep(0.2), 4)
            if first == EXTRACT:
                yield Stage(BUILD, lambda b: time.sleep(0.02), 4)
            yield Stage(MEASURE, lambda r: time.sleep(0.2), 4)
            return 4
        return Job(name, stages, lambda n: {"trials": n})

    # "extract" was submitted first and served no less, but only a build feeds the device
    report = run("load-aware", [job("extract", EXTRACT), job("op", BUILD)])
    cpu = sorted((e for e in report.events if e.resource == "cpu"), key=lambda e: e.start)
    assert [(e.job, e.kind) for e in cpu[:2]] == [("op", BUILD), ("extract", EXTRACT)]
    measure = next(e for e in report.events if e.job == "op" and e.kind == MEASURE)
    assert measure.start < cpu[1].end  # measured while the other job proposed


def test_a_group_of_stages_runs_at_once_on_its_resources_and_gets_its_results_back():
    got = []

    def stages():
        yield Stage(BUILD, lambda b: time.sleep(0.05), 4)
        values = yield (Stage(MEASURE, lambda r: (time.sleep(0.3), "m")[1], 4),
                        Stage(BUILD, lambda b: (time.sleep(0.3), "b")[1], 4))
        got.append(values)
        return 8

    report = run("load-aware", [Job("piped", stages, lambda n: {"trials": n})])
    assert got == [("m", "b")] and report.jobs[0].trials == 4  # the measured candidates
    measure = next(e for e in report.events if e.kind == MEASURE)
    build = [e for e in report.events if e.kind == BUILD][-1]
    assert measure.start < build.end and build.start < measure.end  # they overlapped
    # sequential runs a job as it would run alone: the group's stages in turn
    got.clear()
    report = run("sequential", [Job("piped", stages, lambda n: {"trials": n})])
    assert got == [("m", "b")] and not overlaps(report.events)


def test_a_job_submitted_mid_run_is_scheduled_and_finishes():
    res = FakeResources()
    holder = {}

    def on_event(kind, job, stage):
        if kind == "end" and job.name == "first" and stage.kind == BUILD and "late" not in holder:
            holder["late"] = sched.submit(fake_job("late", rounds=2))

    sched = StageScheduler(res, "load-aware", pin=False, on_event=on_event)
    sched.submit(fake_job("first", rounds=3))
    report = sched.run()
    late = next(j for j in report.jobs if j.name == "late")
    assert late.state == "done" and late.summary["trials"] == 8
    first_start = min(e.start for e in report.events if e.job == "late")
    assert first_start < max(e.end for e in report.events if e.job == "first")


def test_submitting_from_another_thread_while_running_until_stopped():
    sched = StageScheduler(FakeResources(), "load-aware", pin=False)
    sched.submit(fake_job("a", rounds=2))
    done = {}
    t = threading.Thread(target=lambda: done.setdefault("r", sched.run(until_idle=False)))
    t.start()
    time.sleep(0.1)
    sched.submit(fake_job("b", rounds=1))
    deadline = time.time() + 10
    while not all(j.state == "done" for j in sched.jobs) and time.time() < deadline:
        time.sleep(0.02)
    sched.stop()
    t.join(5)
    assert [j.state for j in done["r"].jobs] == ["done", "done"]


class GoneRunner:
    def run(self, inputs, builds, verify=None):
        raise DeviceUnavailable("rpc:127.0.0.1:9190:gone: no free server after 5 tries")


def test_a_device_that_goes_away_is_taken_out_and_its_stage_runs_elsewhere_uncharged():
    res = FakeResources(devices=("cores:1", "rpc:127.0.0.1:9190:gone"))
    res.devices[1].runner = GoneRunner()
    res.devices.reverse()  # the broken one is tried first
    used = []
    report = run("load-aware", [fake_job("a", log=used)], res)
    job = report.jobs[0]
    assert job.state == "done" and job.summary["trials"] == 12 and job.trials == 12
    assert "no free server" in res.devices[0].down
    assert {type(tool).__name__ for _, tool in used} == {"ReplayRunner"}


def test_a_job_whose_stage_raises_fails_alone():
    def broken():
        yield Stage(PROPOSE, lambda _: 1 / 0)
    report = run("load-aware", [Job("bad", broken), fake_job("good", rounds=1)])
    bad, good = report.jobs
    assert bad.state == "failed" and "ZeroDivisionError" in bad.error
    assert good.state == "done"
    assert report.to_json()["jobs"][0]["error"].startswith("ZeroDivisionError")


def test_bad_policy_and_device_names_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown policy 'fastest'"):
        StageScheduler(FakeResources(), "fastest")
    with pytest.raises(ValueError, match="cores:N needs a positive whole N"):
        DeviceSpec.parse("cores:x")
    with pytest.raises(ValueError, match="leaves no core to build on"):
        Layout.plan([DeviceSpec.parse("cores:2")], cores=(0, 1))
    layout = Layout.plan([DeviceSpec.parse("cores:1")], cores=(0, 1))
    assert layout.cpus == (0,) and layout.devices[0][1] == (1,)


def test_measurements_go_to_devices_that_can_run_the_job_and_none_is_refused():
    from tensortune.workload import parse_target

    specs = ("rpc:127.0.0.1:9190:zen3:llvm:znver3", "rpc:127.0.0.1:9190:zen4:llvm:znver4")
    res = FakeResources(devices=specs)
    for device, spec in zip(res.devices, specs):
        device.spec = DeviceSpec.parse(spec)
    used = []
    avx512, avx2 = fake_job("avx512", log=used), fake_job("avx2", log=used)
    avx512.target = parse_target("llvm:skylake-avx512")
    avx2.target = parse_target("llvm:haswell")
    report = run("load-aware", [avx512, avx2], res)
    assert all(j.state == "done" for j in report.jobs)
    on = {(e.job, e.resource) for e in report.events if e.kind == MEASURE}
    assert {r for j, r in on if j == "avx512"} == {specs[1]}
    assert "lacks avx512" in res.devices[0].why_not(avx512.target)
    gpu = fake_job("gpu")
    gpu.target = parse_target("cuda:sm_90")
    with pytest.raises(ValueError, match=r"no device .* can time code for sm_90 \(rpc:"
                                         r".*zen3.*: it runs llvm code, not cuda"):
        StageScheduler(res, "load-aware", pin=False).submit(gpu)
    with pytest.raises(ValueError, match="an RPC device's CPU is named llvm:MCPU"):
        DeviceSpec.parse("rpc:h:9190:k:znver3")
    with pytest.raises(ValueError, match="LLVM knows no x86 CPU 'zen9'"):
        DeviceSpec.parse("rpc:h:9190:k:llvm:zen9")


def test_a_waiting_job_holds_no_resource_while_the_others_go_on():
    from tensortune.tuner.stages import WAIT

    released = threading.Event()

    def waiter():
        yield Stage(WAIT, lambda _: released.wait(10), task="shared")
        yield Stage(PROPOSE, lambda _: None)
        return 0

    def releasing():
        for _ in range(3):
            yield Stage(PROPOSE, lambda _: time.sleep(0.02))
        yield Stage(UPDATE, lambda _: released.set())

    # one build core: a wait that held it would stop the other job for ever
    report = run("load-aware", [Job("w", waiter), Job("r", releasing)], FakeResources(cpu=1))
    assert [j.state for j in report.jobs] == ["done", "done"]
    wait = next(e for e in report.events if e.kind == WAIT)
    assert wait.resource == WAIT and wait.end >= max(e.end for e in report.events
                                                     if e.job == "r") - 1e-3
    assert WAIT not in report.busy and report.busy["cpu"] < 1.0
