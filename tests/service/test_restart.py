"""``kill -9`` of the server mid-job loses no accepted job: on restart, queued and running jobs
continue from their records and finish."""
from __future__ import annotations

import time

from tensortune.records import load_records
from tensortune.service.client import ServiceClient

from .conftest import TOKEN, Server


def test_kill_9_mid_job_and_restart_loses_no_job(tmp_path, onnx_models):
    server = Server(tmp_path / "home").start()
    try:
        with ServiceClient(server.url, TOKEN) as c:
            running = c.submit(onnx_models["odd20"], trials=28)
            queued = c.submit(onnx_models["small24"], trials=8)
            deadline = time.monotonic() + 240
            while c.job(running["id"])["trials_done"] < 8:
                assert time.monotonic() < deadline, c.job(running["id"])
                time.sleep(0.3)
            before = c.job(running["id"])
        server.kill9()
        spent = before["trials_done"]
        records_before = len(load_records(server.home / "records.jsonl"))
        server.start()
        with ServiceClient(server.url, TOKEN) as c:
            ids = {j["id"] for j in c.jobs()}
            assert {running["id"], queued["id"]} <= ids
            first = c.wait(running["id"], poll_s=0.5, timeout_s=400)
            second = c.wait(queued["id"], poll_s=0.5, timeout_s=400)
    finally:
        server.stop()
    assert first["state"] == "done" and second["state"] == "done"
    assert first["restarts"] == 1 and first["artifact"]
    # the budget is kept across the restart: a candidate measured when the server died may
    # be measured again, never a whole budget
    assert spent <= first["trials_done"] <= 28 + 32
    records = load_records(server.home / "records.jsonl")
    assert len(records) > records_before  # it went on tuning, from the records it had
