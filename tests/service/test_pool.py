"""The service over a pool of devices: two TVM RPC servers behind a real tracker on loopback.
Jobs go to the devices that run their target (422 when none does), measurements and the
model's own timing run on the devices, a device that dies mid-run is taken out and the jobs
finish, and a task two running jobs share is tuned once."""
from __future__ import annotations

import threading
import time

import pytest

from tensortune.service.client import ServiceClient, ServiceError
from tensortune.tuner.stages import counts_as_trials

from .conftest import TOKEN, Server

KEYS = ("pool-a", "pool-b")


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """Two RPC servers behind a tracker, and a service timing on both (and nothing else)."""
    from tensortune.orchestrate.loopback import RPCPool

    rpc = RPCPool(KEYS, port=9700, server_port=9800)
    devices = ",".join(rpc.device(key) for key in KEYS)
    # a dead device is given up after 2 more tries 0.5 and 1 s apart, not the default 5 (30 s)
    srv = Server(tmp_path_factory.mktemp("pool"), args=("--devices", devices),
                 env={"TENSORTUNE_DEVICE_RETRIES": "2",
                      "TENSORTUNE_DEVICE_RETRY_PAUSE_S": "0.5"}).start()
    yield srv, rpc
    srv.stop()
    rpc.close()


def _stages(client, job_id, stage):
    return [e["data"] for e in client.events(job_id)
            if e["kind"] == "stage" and e["data"]["stage"] == stage]


def test_jobs_are_measured_and_timed_on_the_pool_and_share_their_tasks(pool, onnx_models):
    server, _ = pool
    results = {}

    def one(name):
        with ServiceClient(server.url, TOKEN) as c:
            job = c.submit(onnx_models["odd20"], trials=24)
            results[name] = c.wait(job["id"], poll_s=0.5, timeout_s=400)

    threads = [threading.Thread(target=one, args=(n,)) for n in ("first", "second")]
    for t in threads:
        t.start()
        time.sleep(0.5)
    for t in threads:
        t.join()
    assert {r["state"] for r in results.values()} == {"done"}, results
    with ServiceClient(server.url, TOKEN) as c:
        events = {n: c.events(r["id"]) for n, r in results.items()}
        measured = {n: _stages(c, r["id"], "measure") for n, r in results.items()}
    devices = {f"rpc:{key}@127.0.0.1" for key in KEYS}
    for name, stages in measured.items():
        assert stages and all(s["resource"].rsplit(":", 1)[0] in devices for s in stages)
        # the model itself was timed on a device of the pool, not in the server
        assert any(s["task"] == "time model" for s in stages), name
    # the same model twice: one job tuned its tasks, the other left them to it and waited
    shared = {n: [e["data"] for e in evs if e["kind"] == "shared"] for n, evs in events.items()}
    taker = next(n for n in shared if shared[n])
    owner = next(n for n in shared if n != taker)
    assert not shared[owner] and {s["tuned_by"] for s in shared[taker]} == {results[owner]["id"]}
    left = {s["task"] for s in shared[taker]}
    for task in results[taker]["tasks"]:
        if task["name"] in left:  # not measured by the taker; its best is the owner's
            assert task["trials"] == 0 and task["source"] == f"job {results[owner]['id']}"
            assert task["best_us"] == next(t["best_us"] for t in results[owner]["tasks"]
                                           if t["key"] == task["key"])
    assert any(e["kind"] == "stage" and e["data"]["stage"] == "wait" for e in events[taker])
    # both built with tuned configs of the same tasks (their latencies are timings on a
    # shared machine, not compared: a busy neighbour once made one 2.4x the other)
    assert all(t["best_us"] for t in results[taker]["tasks"])
    assert {t["key"] for t in results[taker]["tasks"]} == {t["key"] for t in results[owner]["tasks"]}
    assert all(r["latency_ms"] > 0 for r in results.values())


def test_a_target_no_device_of_the_pool_runs_is_refused(pool, onnx_models, tmp_path):
    server, _ = pool
    with ServiceClient(server.url, TOKEN) as c:
        with pytest.raises(ServiceError) as err:
            c.submit(onnx_models["small24"], target="cuda:sm_90")
        assert err.value.status == 422
        assert "no device of this service can time code for sm_90" in str(err.value)
        assert f"rpc:{KEYS[0]}@" in str(err.value) and "a CUDA target" in str(err.value)
    foreign = Server(tmp_path / "foreign", args=(
        "--devices", "rpc:127.0.0.1:9:nowhere:llvm:znver3")).start()
    try:
        with ServiceClient(foreign.url, TOKEN) as c:
            with pytest.raises(ServiceError) as err:
                c.submit(onnx_models["small24"], target="llvm:znver4")
            assert err.value.status == 422 and "(znver3) lacks avx512" in str(err.value)
            assert "hardware_free" in str(err.value)
            job = c.submit(onnx_models["small24"], target="llvm:znver4", hardware_free=True)
            c.cancel(job["id"])  # accepted: nothing of it is timed
    finally:
        foreign.stop()


def test_a_device_that_dies_mid_run_is_taken_out_and_the_jobs_finish(pool, onnx_models):
    server, rpc = pool
    with ServiceClient(server.url, TOKEN) as c:
        jobs = [c.submit(onnx_models[name], trials=24) for name in ("wide72", "small24")]
        deadline = time.monotonic() + 300
        while not any(_stages(c, j["id"], "measure") for j in jobs):
            assert time.monotonic() < deadline, "no measurement started"
            time.sleep(0.2)
        rpc.kill(KEYS[0])
        done = [c.wait(j["id"], poll_s=0.5, timeout_s=500) for j in jobs]
        assert [d["state"] for d in done] == ["done", "done"], done
        cluster = c.cluster()
    down = {d["name"].split("@")[0]: d["down"] for d in cluster["devices"]}
    assert down[f"rpc:{KEYS[0]}"] and not down[f"rpc:{KEYS[1]}"], down
    # every job's trials were measured once: charged trials match the measure stages that
    # did not fail
    for job, view in zip(jobs, done):
        with ServiceClient(server.url, TOKEN) as c:
            ok = sum(s["size"] for s in _stages(c, job["id"], "measure")
                     if not s.get("error") and counts_as_trials("measure", s["task"]))
        assert ok == view["trials_done"]
