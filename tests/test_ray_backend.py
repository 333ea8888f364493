"""The scheduler's stages on a local Ray cluster (``orchestrate.ray_backend``), against the same
job run locally and through a real TVM RPC tracker and server on 127.0.0.1."""
from __future__ import annotations

import os
import threading
import time

import pytest
import ray

from tensortune.measure import DeviceUnavailable, ErrorKind, MeasureInput
from tensortune.records import load_records
from tensortune.orchestrate import JobSpec, Resources, StageScheduler, make_job
from tensortune.orchestrate.devices import DeviceSpec, Layout
from tensortune.orchestrate import ray_backend
from tensortune.orchestrate.ray_backend import (RayBuilder, RayDeviceRunner, RayResources,
                                                _remote, _split, driver_ip, resource_name)
from tensortune.settings import MeasureSettings, Settings
from tensortune.space import Config, task_seeds, task_space
from tensortune.workload import Matmul, Task, default_target

KEY = "tt-ray"
FAST = MeasureSettings(build_workers=1, number=2, repeat=2, min_repeat_ms=0, run_timeout_s=20,
                       threads=1)
SETTINGS = Settings(measure=FAST)
WORKLOAD = Matmul(m=48, n=40, k=24)
TRIALS = 8


@pytest.fixture(scope="module")
def tracker():
    from tvm.rpc.tracker import Tracker

    # other ports than tests/test_rpc_runner.py's, so the two modules never collide
    t = Tracker(host="127.0.0.1", port=9390, port_end=9490, silent=True)
    yield t
    t.terminate()


@pytest.fixture(scope="module")
def rpc_name(tracker):
    from tvm import rpc

    server = rpc.Server(host="127.0.0.1", port=9291, port_end=9389,
                        tracker_addr=("127.0.0.1", tracker.port), key=KEY, silent=True)
    deadline = time.time() + 20
    while not rpc.connect_tracker("127.0.0.1", tracker.port).summary()["queue_info"] \
            .get(KEY, {}).get("free", 0):
        assert time.time() < deadline, "the RPC server did not register"
        time.sleep(0.2)
    yield f"rpc:127.0.0.1:{tracker.port}:{KEY}"
    server.terminate()


@pytest.fixture(scope="module")
def cluster(rpc_name):
    """One small local Ray cluster for the module, declaring one unit of each device."""
    devices = ["local", DeviceSpec.parse(rpc_name).name]
    ray.init(num_cpus=2, include_dashboard=False,
             resources={resource_name(d): 1 for d in devices})
    yield
    ray.shutdown()


def run_job(resources, out) -> list:
    """The same small tune-op job on ``resources``; its records."""
    spec = JobSpec("mm", "tune-op", TRIALS, workload=WORKLOAD.to_dict(), tuner="random")
    sched = StageScheduler(resources, "load-aware", pin=False)
    sched.submit(make_job(spec, SETTINGS, out, threads=1))
    try:
        report = sched.run()
    finally:
        resources.close()
    (job,) = report.jobs
    assert job.state == "done", job.error
    return load_records(out / "mm.jsonl")


def layout(spec: str) -> Layout:
    return Layout.plan([DeviceSpec.parse(spec)])


@pytest.fixture(scope="module")
def local_records(tmp_path_factory):
    return run_job(Resources(layout("local"), SETTINGS, pin=False),
                   tmp_path_factory.mktemp("local"))


def check_same(records, local_records, device):
    assert [r.config for r in records] == [r.config for r in local_records]
    assert len(records) == TRIALS
    assert all(r.ok and r.verified for r in records), [r.message for r in records]
    assert {r.device for r in records} == {device}


def test_a_job_on_local_ray_records_the_same_configs_as_locally(cluster, local_records,
                                                                tmp_path):
    records = run_job(RayResources(layout("local"), SETTINGS), tmp_path)
    check_same(records, local_records, "local")
    assert ray.is_initialized()  # the module's cluster: RayResources did not start it


def test_the_same_job_through_rpc_and_through_a_ray_actor_on_rpc(cluster, rpc_name,
                                                                 local_records, tmp_path):
    """Plain RPC and a Ray device actor wrapping the RPC runner: the same configs, every record
    naming the RPC device."""
    name = DeviceSpec.parse(rpc_name).name
    check_same(run_job(Resources(layout(rpc_name), SETTINGS), tmp_path / "rpc"),
               local_records, name)
    check_same(run_job(RayResources(layout(rpc_name), SETTINGS), tmp_path / "ray"),
               local_records, name)


def inputs_of(n: int, workload=WORKLOAD) -> list[MeasureInput]:
    task = Task(workload, default_target(1))
    return [MeasureInput(task, c) for c in task_seeds(task)[:n]]


def test_a_device_holds_one_unit_and_its_measurements_never_overlap(cluster):
    res = RayResources(layout("local"), SETTINGS)
    try:
        assert res.cpu_capacity == 2
        assert ray.cluster_resources()[resource_name("local")] == 1
        actor = res.devices[0].runner.actor
        assert ray.get(actor.history.remote(), timeout=60) == []  # placed, holding the unit
        assert ray.available_resources().get(resource_name("local"), 0) == 0
        # a second actor for the device cannot be placed while the first holds it
        second = _remote("actor").options(resources={resource_name("local"): 1}).remote(
            DeviceSpec.parse("local"), (), SETTINGS)
        ready, _ = ray.wait([second.history.remote()], timeout=2)
        assert not ready
        ray.kill(second)

        inputs = inputs_of(2)
        builds = res.builder.build(inputs)  # two chunks, one per Ray CPU
        assert all(b.error is ErrorKind.NONE and b.path.startswith(res.builder.workdir)
                   for b in builds), builds
        results = {}

        def measure(i):
            results[i] = res.devices[0].runner.run(inputs, builds)

        threads = [threading.Thread(target=measure, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert all(r.ok and r.verified for rs in results.values() for r in rs), results
        spans = sorted(ray.get(actor.history.remote()))
        assert len(spans) == 2 and spans[0][1] <= spans[1][0]
    finally:
        res.close()


def test_a_failed_build_comes_back_through_ray_as_an_error_value(cluster):
    res = RayResources(layout("local"), SETTINGS)
    try:
        (good,) = inputs_of(1, Matmul(m=32, n=32, k=32))
        space = task_space(good.task)
        # a 32x32 register tile is twice what the template allows
        bad = MeasureInput(good.task, Config({**dict(space.get(0)), "tile_i": (1, 1, 1, 32),
                                              "tile_j": (1, 1, 1, 32)}))
        # a template whose build segfaults the compiler worker
        broken = MeasureInput(Task(good.task.workload, default_target(1),
                                   "tests.faulty_templates:crash_build"), Config(variant=0))
        builds = res.builder.build([bad, good, broken])
        assert builds[0].error is ErrorKind.INVALID_CONFIG and builds[0].path is None
        assert "register tile" in builds[0].message
        assert builds[1].error is ErrorKind.NONE
        assert builds[2].error is ErrorKind.COMPILE_ERROR and builds[2].path is None
        assert "SIGSEGV" in builds[2].message
        results = res.devices[0].runner.run([bad, good, broken], builds)
        assert results[0].error is ErrorKind.INVALID_CONFIG
        assert results[0].message == builds[0].message and results[0].run_s == 0
        assert results[1].ok and results[2].error is ErrorKind.COMPILE_ERROR
    finally:
        res.close()


def test_a_device_no_node_declares_is_refused_by_name(cluster):
    with pytest.raises(ValueError, match="offers 0 of resource 'device:rpc:nobody@127.0.0.1:1'"):
        RayResources(layout("rpc:127.0.0.1:1:nobody"), SETTINGS)
    assert ray.is_initialized()


def test_a_driver_joining_through_loopback_claims_the_heads_address():
    """On one machine with several raylets, the claimed address picks the head's raylet (the
    driver and the actors it owns die with the node it attaches to); elsewhere Ray decides."""
    assert driver_ip("127.0.0.2:6379") == "127.0.0.2"
    # Ray puts the machine's address in place of these: a driver bound to loopback would be
    # out of reach of the cluster's other machines
    for address in ("127.0.0.1:6379", "localhost:6379", "[::1]:6379", "10.0.0.5:6379",
                    "head.example:6379", "auto", "ray://127.0.0.2:10001"):
        assert driver_ip(address) is None, address


def test_batches_split_in_order():
    assert _split(list(range(5)), 2) == [[0, 1, 2], [3, 4]]
    assert _split([1], 4) == [[1]]


@ray.remote(num_cpus=0)
class GoneDevice:
    def run(self, inputs, builds, libs, verify):
        raise DeviceUnavailable("rpc:gone@127.0.0.1:1: no server after 6 tries")


@ray.remote(num_cpus=0, max_restarts=0)
class DyingDevice:
    def run(self, inputs, builds, libs, verify):
        os._exit(1)  # the actor's process dies mid-measurement


@ray.remote(num_cpus=0)
def lost_node(*args):
    raise RuntimeError("node lost")


def test_infrastructure_failures_come_back_as_the_scheduler_expects(cluster, monkeypatch):
    """A device that cannot be had, or whose actor died, is ``DeviceUnavailable`` (the
    scheduler takes it out); a build task that fails fails its candidates, as values."""
    runner = RayDeviceRunner("rpc:gone@127.0.0.1:1", GoneDevice.remote())
    with pytest.raises(DeviceUnavailable, match="no server after 6 tries"):
        runner.run([], [])
    ray.kill(runner.actor)
    runner = RayDeviceRunner("rpc:dying@127.0.0.1:1", DyingDevice.remote())
    with pytest.raises(DeviceUnavailable, match="dying@127.0.0.1:1: its Ray actor died"):
        runner.run([], [])
    monkeypatch.setitem(ray_backend._REMOTE, "build", lost_node)
    builder = RayBuilder(2, 10.0)
    builds = builder.build(inputs_of(3))
    builder.close()
    assert [b.error for b in builds] == [ErrorKind.COMPILE_ERROR] * 3
    assert all("Ray build task failed" in b.message and "node lost" in b.message
               for b in builds), builds


def test_without_ray_the_error_names_the_extra(monkeypatch):
    monkeypatch.setattr(ray_backend, "ray", None)
    with pytest.raises(ImportError, match=r"pip install tensortune\[cluster\]"):
        RayResources(layout("local"), SETTINGS)
