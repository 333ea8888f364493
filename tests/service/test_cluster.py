"""The service on a two-node Ray cluster (``ray start`` on loopback: a head and a second node
with other resources) with two RPC devices behind a tracker, one declared by each node.
Builds run on both nodes and measurements on both devices; a machine leaving mid-run (its Ray
node stopped, its RPC server killed) loses no job."""
from __future__ import annotations

import threading
import time

import pytest

from tensortune.service.client import ServiceClient
from tensortune.tuner.stages import counts_as_trials

from .conftest import TOKEN, Server, free_port

pytest.importorskip("ray")
KEYS = ("node-a", "node-b")


@pytest.fixture(scope="module")
def cluster():
    """Two RPC servers, a Ray head declaring device B and a second node declaring device A
    (so stopping that node and killing A's server leaves B)."""
    from tensortune.orchestrate.loopback import RayNodes, RPCPool

    rpc = RPCPool(KEYS, port=9900, server_port=9951)
    try:
        nodes = RayNodes([rpc.device(KEYS[1]), rpc.device(KEYS[0])], port=free_port())
    except BaseException:
        rpc.close()
        raise
    yield nodes, rpc
    nodes.close()
    rpc.close()


@pytest.fixture(scope="module")
def service(cluster, tmp_path_factory):
    nodes, rpc = cluster
    devices = ",".join(rpc.device(key) for key in KEYS)
    srv = Server(tmp_path_factory.mktemp("cluster"),
                 args=("--devices", devices, "--ray-address", nodes.address)).start(timeout=240)
    yield srv
    srv.stop()


def _stage_events(client, job_id, stage):
    return [e["data"] for e in client.events(job_id)
            if e["kind"] == "stage" and e["data"]["stage"] == stage]


def _submit_all(server, models, trials):
    results = {}

    def one(name):
        try:
            with ServiceClient(server.url, TOKEN) as c:
                results[name] = c.wait(c.submit(models[name], trials=trials)["id"],
                                       poll_s=0.5, timeout_s=600)
        except Exception as e:  # kept with the server's last words, for the assertion's text
            alive = server.proc.poll() is None
            results[name] = {"state": f"client error: {e!r}", "error": None, "id": None,
                             "server": f"alive={alive}\n" + server.log.read_text()[-4000:]}

    threads = [threading.Thread(target=one, args=(n,)) for n in models]
    for t in threads:
        t.start()
    return threads, results


def test_three_jobs_build_on_both_nodes_and_measure_on_both_devices(service, cluster,
                                                                     onnx_models):
    ray_nodes, _ = cluster
    threads, results = _submit_all(service, onnx_models, trials=12)
    for t in threads:
        t.join()
    assert {r["state"] for r in results.values()} == {"done"}, results
    with ServiceClient(service.url, TOKEN) as c:
        cluster = c.cluster()
        builds = [s for r in results.values() for s in _stage_events(c, r["id"], "build")]
        measures = [s for r in results.values() for s in _stage_events(c, r["id"], "measure")]
    nodes = {n["name"] for n in cluster["nodes"] if n["alive"]}
    assert len(nodes) == 2 and cluster["ray"]
    # each node has an address of its own and the service's driver is attached to the head,
    # so the second node can leave without taking the actors the driver owns along
    assert sorted(n["address"] for n in cluster["nodes"]) == sorted(ray_nodes.ips)
    (driver,) = [n for n in cluster["nodes"] if n["driver"]]
    assert driver["address"] == ray_nodes.ips[0], cluster["nodes"]
    assert {n for b in builds for n in b.get("nodes", [])} == nodes  # named in the events
    assert {m["resource"] for m in measures} == {d["name"] for d in cluster["devices"]}
    assert len(cluster["devices"]) == 2


def test_a_machine_leaving_mid_run_loses_no_job(service, cluster, onnx_models):
    """The second node (device A's actor, half the build CPUs) and A's RPC server go away while
    jobs build and measure: A is taken out, the head's actor times device B on, and every job
    finishes, each candidate charged once."""
    nodes, rpc = cluster
    threads, results = _submit_all(service, onnx_models, trials=24)
    with ServiceClient(service.url, TOKEN) as c:
        deadline = time.monotonic() + 300
        while not any(_stage_events(c, j["id"], "measure") for j in c.jobs()
                      if j["state"] == "running"):
            assert time.monotonic() < deadline, "no measurement started"
            time.sleep(0.2)
        nodes.stop_node(1)  # device A's node: its actor dies, its build tasks run again
        rpc.kill(KEYS[0])  # and A's server, as if the whole machine left
        stopped_at = time.time()
        for t in threads:
            t.join()
        assert {r["state"] for r in results.values()} == {"done"}, (
            [(r["state"], r["error"], r.get("server")) for r in results.values()],
            c.cluster()["devices"])
        cluster_view = c.cluster()
        events = {r["id"]: c.events(r["id"]) for r in results.values()}
        for r in results.values():
            # charged once per measured candidate: a model's timing and the confirmation's
            # re-timings are no trials
            ok = sum(s["size"] for s in _stage_events(c, r["id"], "measure")
                     if not s.get("error") and counts_as_trials("measure", s["task"]))
            assert ok == r["trials_done"]
    down = {d["name"].split("@")[0]: d["down"] for d in cluster_view["devices"]}
    assert down[f"rpc:{KEYS[0]}"] and not down[f"rpc:{KEYS[1]}"], down
    alive = {n["name"]: n["alive"] for n in cluster_view["nodes"]}
    assert sorted(alive.values()) == [False, True], alive  # the head stays, the node left
    assert all(n["alive"] for n in cluster_view["nodes"] if n["driver"]), cluster_view["nodes"]
    # the events say which device was taken out, and why: its actor went with the node
    lost = [e["data"] for evs in events.values() for e in evs if e["kind"] == "device_down"]
    assert lost and {e["device"].split("@")[0] for e in lost} == {f"rpc:{KEYS[0]}"}, lost
    assert any("Ray actor died" in e["why"] for e in lost), lost
    # builds begun after the node left ran on the head alone, and none was lost with the node
    later = [e["data"] for evs in events.values() for e in evs if e["kind"] == "stage"
             and e["data"]["stage"] == "build" and e["t"] - e["data"]["seconds"] > stopped_at]
    assert later and {n for b in later for n in b.get("nodes", [])} <= {
        n for n, up in alive.items() if up}
    assert "Ray build task failed" not in (service.home / "records.jsonl").read_text()
