"""``RPCRunner`` against a real TVM RPC tracker and servers on 127.0.0.1."""
import dataclasses
import json
import threading
import time

import pytest

from tensortune.measure import (DeviceUnavailable, ErrorKind, LocalBuilder, LocalRunner,
                                MeasureInput, RPCDevice, RPCRunner)
from tensortune.records import load_records
from tensortune.settings import MeasureSettings, Settings
from tensortune.space import task_seeds
from tensortune.tuner import tune_task
from tensortune.workload import Matmul, Task, default_target

KEY = "tt-test"
FAST = MeasureSettings(build_workers=1, number=2, repeat=2, min_repeat_ms=0, run_timeout_s=20,
                       threads=1)


@pytest.fixture(scope="module")
def tracker():
    from tvm.rpc.tracker import Tracker

    t = Tracker(host="127.0.0.1", port=9190, port_end=9290, silent=True)
    yield t
    t.terminate()


def start_server(tracker, key=KEY):
    from tvm import rpc

    server = rpc.Server(host="127.0.0.1", port=9091, port_end=9199,
                        tracker_addr=("127.0.0.1", tracker.port), key=key, silent=True)
    _wait_free(tracker, key)
    return server


def _wait_free(tracker, key, timeout_s=20.0):
    from tvm import rpc

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        queue = rpc.connect_tracker("127.0.0.1", tracker.port).summary()["queue_info"]
        if queue.get(key, {}).get("free", 0):
            return
        time.sleep(0.2)
    raise TimeoutError(f"no free server for {key} after {timeout_s} s")


def kill_tree(server) -> None:
    """SIGKILL an RPC server and every process it started (its sessions run in children)."""
    import psutil

    root = psutil.Process(server.proc._proc.pid)
    for p in root.children(recursive=True) + [root]:
        p.kill()


@pytest.fixture
def server(tracker):
    s = start_server(tracker)
    yield s
    s.terminate()


def device(tracker, key=KEY):
    return RPCDevice("127.0.0.1", tracker.port, key)


def test_device_spec_is_parsed_and_checked():
    assert RPCDevice.parse("rpc:127.0.0.1:9190:board") == RPCDevice("127.0.0.1", 9190, "board")
    assert RPCDevice.parse("h:1:k").name == "rpc:k@h:1"
    for bad in ("rpc:host:9190", "host:port:key", "h:70000:k", "::"):
        with pytest.raises(ValueError, match="RPC device"):
            RPCDevice.parse(bad)


def test_tuning_through_rpc_records_the_same_configs_as_locally(tracker, server, tmp_path):
    """The same small job, seed and trials, locally and through the tracker: the same configs
    are proposed and measured (timings differ), every RPC one is verified and names its
    device; a second task on the same runner (where TVM RPC users see hangs) finishes too."""
    task = Task(Matmul(m=48, n=40, k=24), default_target(1))
    settings = Settings(measure=FAST)
    local = tune_task(task, 8, tuner="random", log=tmp_path / "local.jsonl", settings=settings)
    with RPCRunner(device(tracker), dataclasses.replace(FAST, verify="all")) as runner:
        remote = tune_task(task, 8, tuner="random", log=tmp_path / "rpc.jsonl",
                           settings=settings, runner=runner)
        second = tune_task(Task(Matmul(m=24, n=32, k=40), default_target(1)), 4,
                           tuner="random", log=tmp_path / "rpc2.jsonl", settings=settings,
                           runner=runner)
    assert second.trials == 4 and second.best_config is not None
    local_recs = load_records(tmp_path / "local.jsonl")
    rpc_recs = load_records(tmp_path / "rpc.jsonl")
    assert [r.config for r in rpc_recs] == [r.config for r in local_recs]
    assert all(r.device == "local" for r in local_recs)
    assert all(r.device == f"rpc:{KEY}@127.0.0.1:{tracker.port}" for r in rpc_recs)
    assert all(r.ok and r.verified for r in rpc_recs)
    assert remote.best_config is not None and local.best_config is not None


def test_a_server_killed_mid_measurement_costs_a_retry_not_the_run(tracker, server):
    """The server dies while a slow candidate is being timed; a new one registers; the
    candidate is measured again on a fresh session and the batch finishes."""
    task = Task(Matmul(m=64, n=64, k=64), default_target(1))
    config = task_seeds(task)[0]
    inputs = [MeasureInput(task, config)] * 2
    slow = dataclasses.replace(FAST, number=1, repeat=3, min_repeat_ms=700)
    with LocalBuilder(1) as builder:
        builds = builder.build(inputs[:1]) * 2
        replacement = {}

        def kill_then_replace():
            time.sleep(1.0)  # inside the first candidate's 2.1 s of timing
            kill_tree(server)  # the listener and the session process it forked
            replacement["server"] = start_server(tracker)

        killer = threading.Thread(target=kill_then_replace)
        with RPCRunner(device(tracker), slow, retries=5, retry_pause_s=1.0) as runner:
            killer.start()
            results = runner.run(inputs, builds, verify=[True, True])
        killer.join()
    replacement["server"].terminate()
    assert [r.error for r in results] == [ErrorKind.NONE, ErrorKind.NONE], [r.message for r in results]
    assert all(r.verified for r in results)


def test_no_server_for_the_key_raises_after_retries_without_a_record(tracker):
    """The retries are settings (``TENSORTUNE_DEVICE_RETRIES``, ``..._RETRY_PAUSE_S``)."""
    task = Task(Matmul(m=16, n=16, k=16), default_target(1))
    inputs = [MeasureInput(task, task_seeds(task)[0])]
    with LocalBuilder(1) as builder:
        builds = builder.build(inputs)
    read = Settings.from_env({"TENSORTUNE_DEVICE_RETRIES": "2",
                              "TENSORTUNE_DEVICE_RETRY_PAUSE_S": "0.1"}).measure
    assert (read.device_retries, read.device_retry_pause_s) == (2, 0.1)
    settings = dataclasses.replace(FAST, device_retries=read.device_retries,
                                   device_retry_pause_s=read.device_retry_pause_s)
    start = time.perf_counter()
    with RPCRunner(device(tracker, key="nobody"), settings) as runner:
        with pytest.raises(DeviceUnavailable, match="nobody.*no server after 3 tries"):
            runner.run(inputs, builds)
    assert time.perf_counter() - start < 30


def test_a_tracker_that_is_not_there_fails_fast_without_a_record():
    """TVM retries a refused tracker for a minute; that must not become a charged timeout."""
    task = Task(Matmul(m=16, n=16, k=16), default_target(1))
    inputs = [MeasureInput(task, task_seeds(task)[0])]
    with LocalBuilder(1) as builder:
        builds = builder.build(inputs)
    start = time.perf_counter()
    gone = RPCDevice("127.0.0.1", 9, KEY)  # the discard port: nothing listens there
    with RPCRunner(gone, FAST, retries=1, retry_pause_s=0.1) as runner:
        with pytest.raises(DeviceUnavailable, match="Connection refused"):
            runner.run(inputs, builds)
    assert time.perf_counter() - start < FAST.run_timeout_s


def test_a_candidate_that_fails_on_the_device_is_its_error_and_the_session_survives(
        tracker, server):
    """A library that cannot be loaded is the candidate's runtime error; the next candidate
    runs on the same session."""
    task = Task(Matmul(m=16, n=16, k=16), default_target(1))
    inputs = [MeasureInput(task, task_seeds(task)[0])] * 2
    with LocalBuilder(1) as builder, LocalRunner(FAST) as local:
        good = builder.build(inputs[:1])[0]
        bad = dataclasses.replace(good, path=good.path + ".missing")
        with RPCRunner(device(tracker), FAST) as runner:
            results = runner.run(inputs, [bad, good])
        assert local.run(inputs[:1], [good])[0].ok
    assert results[0].error is ErrorKind.RUNTIME_ERROR
    assert results[1].ok


def test_tune_op_through_an_rpc_device_and_a_bad_device_spec(tracker, server, tmp_path,
                                                              monkeypatch):
    from typer.testing import CliRunner

    from tensortune.cli import app

    cli = CliRunner()
    res = cli.invoke(app, ["tune-op", "matmul", "--m", "8", "--n", "8", "--k", "8",
                           "--device", "rpc:localhost:notaport:k"])
    assert res.exit_code == 2 and "is not a TCP port" in res.output
    monkeypatch.setenv("TENSORTUNE_MIN_REPEAT_MS", "2")
    monkeypatch.setenv("TENSORTUNE_REPEAT", "2")
    log = tmp_path / "r.jsonl"
    res = cli.invoke(app, ["tune-op", "matmul", "--m", "32", "--n", "32", "--k", "16",
                           "--trials", "4", "--tuner", "random", "--log", str(log), "--json",
                           "--device", f"rpc:127.0.0.1:{tracker.port}:{KEY}"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output.strip().splitlines()[-1])
    assert summary["device"] == f"rpc:{KEY}@127.0.0.1:{tracker.port}"
    assert summary["trials"] == 4 and summary["best_us"] > 0
    assert {r.device for r in load_records(log)} == {summary["device"]}


def test_a_whole_saved_model_is_timed_on_the_server_and_a_broken_one_is_an_error(
        tracker, server, tmp_path):
    """What a service job's last measurement does: the model, its weights and inputs sent to
    the device and ``main`` timed there (a tuple output too: the VM's stateful API)."""
    import torch
    from torch import nn

    from tensortune.frontend.model import random_inputs
    from tensortune.measure.model_timing import ModelTimer, save_inputs
    from tensortune.session import Session

    class TwoOut(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 20, 3)

        def forward(self, x):
            y = self.conv(x)
            return y.relu(), y.mean()

    settings = Settings(home=tmp_path / "home", measure=FAST)
    compiled = Session.from_torch(TwoOut().eval(), (torch.randn(1, 3, 13, 13),),
                                  settings=settings).build(tuned=False)
    compiled.save(tmp_path / "timing")
    save_inputs(tmp_path / "timing", random_inputs(compiled.inputs))
    with RPCRunner(device(tracker), FAST) as remote, LocalRunner(FAST) as local:
        assert isinstance(remote, ModelTimer) and isinstance(local, ModelTimer)
        for runner in (remote, local):
            costs = runner.time_model(str(tmp_path / "timing"), repeat=3, min_repeat_ms=0)
            assert len(costs) == 3 and all(c > 0 for c in costs)
        (tmp_path / "timing" / "inputs.npz").unlink()
        for runner in (remote, local):
            with pytest.raises(RuntimeError, match="timing the model"):
                runner.time_model(str(tmp_path / "timing"), repeat=3, min_repeat_ms=0)
