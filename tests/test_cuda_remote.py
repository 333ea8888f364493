"""``CUDARemoteRunner`` against the device runner's HTTP server on loopback (fake backend: no
GPU here), and ``tune-op --device cuda:URL`` through it end to end."""
from __future__ import annotations

import json
import threading

import pytest
from typer.testing import CliRunner

from tensortune.cli import app
from tensortune.device_runner.server import make_server
from tensortune.measure import BuildResult, DeviceUnavailable, ErrorKind, MeasureInput
from tensortune.measure.cuda_remote import CUDARemoteRunner
from tensortune.records import load_records
from tensortune.settings import MeasureSettings
from tensortune.space import task_space
from tensortune.workload import Matmul, Task

CUDA = {"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}}
MATMUL = Task(Matmul(m=32, n=24, k=16), CUDA, template="cuda.generic")
KERNELS = [{"name": "main_kernel", "grid": [4, 1, 1], "block": [32, 1, 1], "shared_bytes": 0,
            "args": [0, 1, 2]}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = make_server("127.0.0.1", 0, workdir=str(tmp_path_factory.mktemp("srv")),
                      backend="fake")
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def fake_build(tmp_path, name: str, behaviour: str, us: float = 7.0) -> BuildResult:
    """A build whose "cubin" is the fake backend's JSON, with the launch spec beside it."""
    (tmp_path / f"{name}.cubin").write_text(json.dumps({"behaviour": behaviour, "us": us}))
    (tmp_path / f"{name}.json").write_text(json.dumps({"kernels": KERNELS}))
    return BuildResult(str(tmp_path / f"{name}.cubin"), 0.5)


def test_remote_runner_times_checks_and_passes_build_errors_through(server, tmp_path):
    configs = task_space(MATMUL).sample_many(3, __import__("numpy").random.default_rng(0))
    inputs = [MeasureInput(MATMUL, c) for c in configs]
    builds = [fake_build(tmp_path, "a", "ok", 7.0),
              BuildResult(None, 0.1, ErrorKind.INVALID_CONFIG, "too many threads"),
              fake_build(tmp_path, "c", "wrong")]
    runner = CUDARemoteRunner(server, MeasureSettings())
    ok, invalid, wrong = runner.run(inputs, builds)
    assert ok.ok and ok.verified and ok.costs == (7e-6,) * 5 and ok.build_s == 0.5
    assert ok.device == "Fake GPU (fake)"
    assert invalid.error is ErrorKind.INVALID_CONFIG and invalid.message == "too many threads"
    assert wrong.error is ErrorKind.WRONG_RESULT and "max abs error" in wrong.message


def test_a_device_nobody_serves_is_unavailable_not_the_candidates_fault(tmp_path):
    runner = CUDARemoteRunner("http://127.0.0.1:9", MeasureSettings(), retries=2,
                              retry_pause_s=0.0)
    inp = MeasureInput(MATMUL, task_space(MATMUL).get(0))
    with pytest.raises(DeviceUnavailable, match="127.0.0.1:9"):
        runner.run([inp], [fake_build(tmp_path, "a", "ok")])
    with pytest.raises(ValueError, match="http://HOST:PORT"):
        CUDARemoteRunner("127.0.0.1:9", MeasureSettings())


def test_tune_op_tunes_a_cuda_kernel_through_the_device_runner(server, tmp_path):
    log = tmp_path / "r.jsonl"
    result = CliRunner().invoke(app, [
        "tune-op", "matmul", "--m", "64", "--n", "64", "--k", "32", "--target", "cuda:sm_90",
        "--device", f"cuda:{server}", "--trials", "6", "--tuner", "random", "--log", str(log),
        "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["trials"] == 6 and summary["device"] == f"cuda:{server}"
    # the fake times a real cubin at 5-105 us, a function of its code
    assert 5.0 <= summary["best_us"] <= 105.0
    timed = [r for r in load_records(log) if r.ok]
    assert len(timed) == 6 and all(r.verified and r.device == "Fake GPU (fake)" for r in timed)
    assert min(r.cost for r in timed) * 1e6 == pytest.approx(summary["best_us"])
