"""``tensortune submit``, ``jobs`` and ``fetch`` against a real server."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from .conftest import TOKEN


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "tensortune", *args], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, **(env or {})))


def test_submit_wait_jobs_and_fetch(server, onnx_models, tmp_path):
    env = {"TENSORTUNE_TOKEN": TOKEN, "TENSORTUNE_SERVER": server.url}
    run = _cli("submit", str(onnx_models["wide72"]), "--trials", "4", "--wait", "--json",
               env=env)
    assert run.returncode == 0, run.stderr
    job = json.loads(run.stdout.strip().splitlines()[-1])
    assert job["state"] == "done" and job["name"] == "wide72"
    listed = _cli("jobs", "--json", env=env)
    assert job["id"] in {j["id"] for j in json.loads(listed.stdout)}
    fetched = _cli("fetch", job["id"], "-o", str(tmp_path / "out"), env=env)
    assert fetched.returncode == 0, fetched.stderr
    assert (tmp_path / "out" / "module" / "model.so").exists()
    bad = _cli("jobs", "--server", server.url, "--token", "not-the-token-0123456789")
    assert bad.returncode != 0 and "HTTP 401" in bad.stdout + bad.stderr
    missing = _cli("submit", str(tmp_path / "nope.onnx"), env=env)
    assert missing.returncode != 0 and "no file" in missing.stdout + missing.stderr


def test_serve_refuses_a_bad_device_list_before_starting(tmp_path):
    for devices, says in (("gpu0", "unknown device"), ("local,cores:1", "same CPU"),
                          ("cores:0", "positive whole N")):
        run = _cli("serve", "--devices", devices, "--port", "1",
                   env={"TENSORTUNE_HOME": str(tmp_path)})
        assert run.returncode != 0 and says in run.stdout + run.stderr, (devices, run.stdout)
        assert "tensortune service on" not in run.stdout  # refused before anything started
