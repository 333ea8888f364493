"""Jobs over real HTTP: submit, poll, fetch, run the module against onnxruntime; the SLA
short-cut; several clients at once; cancelling."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tensortune.service.client import ServiceClient, ServiceError

from .conftest import TOKEN


@pytest.fixture
def client(server):
    with ServiceClient(server.url, TOKEN) as c:
        yield c


def _run_artifact(directory, x):
    from tensortune.tasks import CompiledModel

    return CompiledModel.load(directory / "module", threads=2).run(x)[0]


def test_submit_poll_fetch_and_the_module_matches_onnxruntime(client, onnx_models, tmp_path):
    import onnxruntime as ort

    job = client.submit(onnx_models["odd20"], trials=24)  # 4 for each of its 6 tasks
    assert job["state"] == "queued"
    seen = []
    done = client.wait(job["id"], poll_s=0.5, timeout_s=300, on_poll=seen.append)
    assert done["state"] == "done", done
    assert done["progress"] == 1.0 and 0 < done["trials_done"] <= 24
    assert done["latency_ms"] > 0 and done["sla_met"] is None
    assert done["tasks"] and all(t["best_us"] for t in done["tasks"])
    assert any(p["latency_ms"] for p in done["curve"])  # the timed model is on the curve
    assert {s["state"] for s in seen} >= {"done"}
    out = client.fetch(job["id"], tmp_path / "out")
    assert {p.name for p in out.iterdir()} >= {"module", "metaschedule", "run.json"}
    x = np.random.default_rng(0).standard_normal((1, 3, 37, 37)).astype("float32")
    expected = ort.InferenceSession(str(onnx_models["odd20"])).run(None, {"x": x})[0]
    np.testing.assert_allclose(_run_artifact(out, x), expected, rtol=1e-4, atol=1e-4)


def test_the_sla_shortcut_returns_at_once_without_a_trial(client, onnx_models):
    first = client.wait(client.submit(onnx_models["small24"], trials=8)["id"], timeout_s=300)
    assert first["state"] == "done"
    start = time.monotonic()
    again = client.submit(onnx_models["small24"], sla_ms=first["latency_ms"] * 2)
    view = client.wait(again["id"], poll_s=0.2, timeout_s=30)
    assert time.monotonic() - start < 5
    assert again["state"] == "done" and view["sla_met"] and view["trials_done"] == 0
    assert view["artifact"] and "no trial" in view["note"]


def test_a_job_that_cannot_meet_its_sla_says_so(client, onnx_models):
    job = client.wait(client.submit(onnx_models["small24"], sla_ms=1e-6, trials=4)["id"],
                      timeout_s=300)
    assert job["state"] == "done" and job["sla_met"] is False
    assert "not met" in job["note"] and f"{job['latency_ms']:.4g}" in job["note"]


def test_three_clients_at_once_all_finish(server, onnx_models):
    results, errors = {}, []

    def one(name):
        try:
            with ServiceClient(server.url, TOKEN) as c:
                job = c.submit(onnx_models[name], trials=8)
                results[name] = c.wait(job["id"], poll_s=0.5, timeout_s=400)
        except Exception as err:  # reported below
            errors.append(f"{name}: {err}")

    threads = [threading.Thread(target=one, args=(n,)) for n in onnx_models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert {r["state"] for r in results.values()} == {"done"}
    assert len({r["id"] for r in results.values()}) == 3


def test_cancel_stops_a_job_and_leaves_the_others(client, onnx_models):
    long = client.submit(onnx_models["wide72"], trials=5000)
    deadline = time.monotonic() + 120
    while client.job(long["id"])["state"] == "queued" and time.monotonic() < deadline:
        time.sleep(0.2)
    cancelled = client.cancel(long["id"])
    assert cancelled["state"] == "cancelled"
    time.sleep(2)
    assert client.job(long["id"])["state"] == "cancelled"
    assert client.cancel(long["id"])["state"] == "cancelled"  # twice is fine
    short = client.wait(client.submit(onnx_models["small24"], trials=4)["id"], timeout_s=300)
    assert short["state"] == "done"
    with pytest.raises(ServiceError) as err:
        client.fetch(long["id"], "unused")
    assert err.value.status == 409


def test_a_hardware_free_job_times_no_candidate(client, onnx_models):
    job = client.wait(client.submit(onnx_models["small24"], hardware_free=True)["id"],
                      timeout_s=400)
    assert job["state"] == "done", job
    assert job["trials_done"] == 0 and job["predicted_ms"] > 0 and job["latency_ms"] > 0
    assert "none run" in job["note"] and job["artifact"]


def test_cluster_and_metrics_report_the_device_the_jobs_ran_on(client, server, onnx_models):
    """After a job: ``/v1/cluster`` lists this machine and its one device, which was busy a
    while; ``/metrics`` (Prometheus' text format) counts the jobs by state and every trial."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    job = client.wait(client.submit(onnx_models["odd20"], trials=8)["id"], timeout_s=300)
    assert job["state"] == "done"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    cluster = httpx.get(server.url + "/v1/cluster", headers=auth).json()
    assert cluster["devices_spec"] == "local" and cluster["ray"] is False
    assert [d["name"] for d in cluster["devices"]] == ["local"]
    device = cluster["devices"][0]
    assert device["down"] is None and 0 < device["busy_fraction"] <= 1
    assert cluster["nodes"] and cluster["nodes"][0]["alive"] and cluster["cpu"]["capacity"] >= 1
    r = httpx.get(server.url + "/metrics", headers=auth)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(r.text) for s in family.samples}
    jobs = client.jobs()
    done = sum(j["state"] == "done" for j in jobs)
    assert samples[("tensortune_jobs", (("state", "done"),))] == done
    # every trial this server process measured (jobs of an earlier process are not counted)
    assert samples[("tensortune_trials_total", ())] >= job["trials_done"] > 0
    assert samples[("tensortune_device_busy_fraction", (("device", "local"),))] > 0
    assert samples[("tensortune_device_up", (("device", "local"),))] == 1
    assert ("tensortune_trials_per_second", ()) in samples
