"""The TVM-free device runner, driven through its fake backend (no GPU needed)."""
from __future__ import annotations

import ast
import gzip
import io
import json
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from tensortune.device_runner import (
    BatchError, RemoteError, device_info, load_batch, read_results, run_batch, run_remote,
)
from tensortune.device_runner.batch import (append_result, generate_array, load_data,
                                            result_line, sha256_of)
from tensortune.device_runner.client import _request as post
from tensortune.device_runner.runner import arch_mismatch, ordered_results
from tensortune.device_runner.server import make_server

PACKAGE = Path(__file__).resolve().parents[1] / "tensortune" / "device_runner"


def make_batch(root: Path, behaviours, *, us=12.5, repeat=5, timeout_s=10.0) -> Path:
    """A batch of fake candidates computing in0 + in1 (the fake writes the reference)."""
    (root / "data").mkdir(parents=True)
    (root / "kernels").mkdir()
    rng = np.random.default_rng(0)
    in0 = rng.standard_normal((2, 3, 4)).astype(np.float32)
    in1 = rng.standard_normal((2, 3, 4)).astype(np.float32)
    np.savez(root / "data" / "w0.npz", in0=in0, in1=in1, ref=in0 + in1)
    candidates = []
    for i, behaviour in enumerate(behaviours):
        (root / "kernels" / f"{i}.cubin").write_text(json.dumps({"behaviour": behaviour, "us": us}))
        candidates.append({
            "index": i, "key": f"key{i}", "data": "w0", "module": f"kernels/{i}.cubin",
            "kernels": [{"name": "main_kernel", "grid": [6, 1, 1], "block": [4, 1, 1],
                         "shared_bytes": 0, "args": [0, 1, 2]}],
            "record": {"opaque": [i]},
        })
    spec = {"shape": [2, 3, 4], "dtype": "float32"}
    manifest = {
        "format": "tensortune.cuda-batch", "version": 1, "arch": "sm_90",
        "timing": {"warmup": 2, "repeat": repeat, "min_repeat_ms": 2.0, "timeout_s": timeout_s},
        "data": {"w0": {"file": "data/w0.npz", "inputs": [spec, spec], "output": spec,
                        "rtol": 1e-5, "atol": 1e-5}},
        "candidates": candidates,
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def make_generated_batch(root: Path, behaviours, *, shape=(6, 50), stride=11,
                         compress=False) -> Path:
    """A version 2 batch of fake candidates computing in0 + in1: inputs generated on the
    runner's side (seeds and sha256 in the manifest), the reference a strided sample."""
    (root / "data").mkdir(parents=True)
    (root / "kernels").mkdir()
    gens = [{"seed": 7 + i, "low": -1.0, "high": 1.0} for i in range(2)]
    in0, in1 = (generate_array(shape, "float32", **g) for g in gens)
    np.savez(root / "data" / "w0.npz", ref=(in0 + in1).reshape(-1)[::stride])
    candidates = []
    for i, behaviour in enumerate(behaviours):
        module = f"kernels/{i}.cubin" + (".gz" if compress else "")
        blob = json.dumps({"behaviour": behaviour, "us": 10.0}).encode()
        (root / module).write_bytes(gzip.compress(blob) if compress else blob)
        candidates.append({
            "index": i, "key": f"key{i}", "data": "w0", "module": module,
            "kernels": [{"name": "main_kernel", "grid": [6, 1, 1], "block": [50, 1, 1],
                         "shared_bytes": 0, "args": [0, 1, 2]}],
            "record": {"task": "t0", "config": {"i": i}},
        })
    spec = {"shape": list(shape), "dtype": "float32"}
    manifest = {
        "format": "tensortune.cuda-batch", "version": 2, "arch": "sm_90",
        "timing": {"warmup": 1, "repeat": 2, "min_repeat_ms": 1.0, "timeout_s": 10.0},
        "data": {"w0": {"file": "data/w0.npz", "rtol": 1e-5, "atol": 1e-5,
                        "inputs": [{**spec, "generate": g, "sha256": sha256_of(x)}
                                   for g, x in zip(gens, (in0, in1))],
                        "output": {**spec, "stride": stride}}},
        "tasks": {"t0": {"workload": {"op": "add"}}},
        "candidates": candidates,
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def edit_manifest(root: Path, edit) -> None:
    doc = json.loads((root / "manifest.json").read_text())
    edit(doc)
    (root / "manifest.json").write_text(json.dumps(doc))


def test_error_kinds_in_order_and_later_candidates_still_run(tmp_path):
    kinds = ["ok", "wrong", "launch_error", "crash", "hang", "ok"]
    root = make_batch(tmp_path / "b", kinds, timeout_s=1.5)
    summary = run_batch(root, backend="fake")
    lines = ordered_results(load_batch(root), root / "results.jsonl")
    assert [line["index"] for line in lines] == list(range(6))
    assert [line["error"] for line in lines] == [
        "none", "wrong_result", "runtime_error", "runtime_error", "timeout", "none"]
    assert lines[1]["message"].startswith("max abs error")
    assert lines[2]["message"].startswith("RuntimeError: fake launch error")
    assert "second line" not in lines[2]["message"]
    assert lines[3]["message"] == "worker died (exit code 3)"
    assert all(line["costs"] == [] for line in lines[1:5])
    assert [line["verified"] for line in lines] == [True, False, False, False, False, True]
    assert all(line["device"] == "Fake GPU (fake)" and line["v"] == 1 for line in lines)
    assert summary["counts"] == {"none": 2, "wrong_result": 1, "runtime_error": 2, "timeout": 1}
    assert summary["workers"] == 4  # restarted after the launch error, the crash and the hang


def test_costs_come_from_the_timer(tmp_path):
    root = make_batch(tmp_path / "b", ["ok", "ok"], us=12.5, repeat=4)
    run_batch(root, backend="fake")
    for line in read_results(root / "results.jsonl").values():
        assert line["error"] == "none" and line["verified"]
        assert line["costs"] == pytest.approx([12.5e-6] * 4)
        assert line["message"] == "number 160"  # 2 ms / 12.5 us per call
        assert set(line) == {"v", "index", "key", "costs", "error", "message", "verified",
                             "device", "ts"}


def test_a_killed_run_resumes(tmp_path):
    root = make_batch(tmp_path / "b", ["crash", "crash", "ok", "ok"])
    results = root / "results.jsonl"
    for i in (0, 1):
        append_result(results, result_line(i, f"key{i}", "none", [1.0], message="earlier"))
    append_result(results, result_line(2, "another batch's key", "timeout"))
    with open(results, "ab") as f:
        f.write(b'{"v": 1, "index": 3, "ke')  # the worker died mid-write
    summary = run_batch(root, backend="fake", timeout_s=5)
    lines = ordered_results(load_batch(root), results)
    assert [line["message"] for line in lines[:2]] == ["earlier", "earlier"]
    assert [line["error"] for line in lines] == ["none"] * 4
    assert lines[2]["key"] == "key2"
    assert summary["resumed"] == 2 and summary["workers"] == 1
    assert run_batch(root, backend="fake")["workers"] == 0  # nothing left to do


def test_out_option_and_cli_summary(tmp_path):
    root = make_batch(tmp_path / "b", ["ok", "wrong"])
    out = tmp_path / "elsewhere.jsonl"
    proc = subprocess.run([sys.executable, "-m", "tensortune.device_runner", str(root),
                           "--backend", "fake", "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "2 candidates: 1 none, 1 wrong_result" in proc.stdout
    assert not (root / "results.jsonl").exists() and len(read_results(out)) == 2


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.update(format="other"), "'format'"),
    (lambda d: d.update(version=3), "'version'"),
    (lambda d: d.pop("timing"), "timing is missing"),
    (lambda d: d["timing"].update(repeat=0), "timing.repeat"),
    (lambda d: d["candidates"][0].update(data="w9"), "unknown data name 'w9'"),
    (lambda d: d["candidates"][0]["kernels"][0].update(args=[0, 1, 3]), "args[2]: index 3 out of range"),
    (lambda d: d["candidates"][0].update(module="kernels/9.cubin"), "missing file kernels/9.cubin"),
    (lambda d: d["candidates"][0].update(module="../b/kernels/0.cubin"), "leaves the batch"),
    (lambda d: d["candidates"][0]["kernels"][0].update(grid=[0, 1, 1]), "kernels[0].grid"),
    (lambda d: d["data"]["w0"]["output"].update(dtype="object"), "not numeric"),
    (lambda d: d["candidates"][1].update(index=0), "index 0 appears twice"),
])
def test_bad_manifests_name_the_problem(tmp_path, edit, words):
    root = make_batch(tmp_path / "b", ["ok", "ok"])
    edit_manifest(root, edit)
    with pytest.raises(BatchError) as err:
        load_batch(root)
    assert words in str(err.value)


def test_generated_inputs_are_numpys_uniform_draws_and_stable():
    a = generate_array((3, 5), "float32", 123, -1.0, 1.0)
    rng = np.random.default_rng(123)
    assert np.array_equal(a, (-1 + 2 * rng.random(15)).astype(np.float32).reshape(3, 5))
    # the bit stream is numpy's promise across versions: these bytes must never change
    assert sha256_of(a) == "4524aefb8335e5b425322e94e618e392041150db5bc5d2880f015de3bad09889"
    assert not generate_array((2, 3), "int32", 1, 0.0, 0.0).any()  # indices: zeros
    flags = generate_array((1000,), "bool", 1, 0.0, 2.0)
    assert flags.dtype == bool and 400 < flags.sum() < 600


@pytest.mark.parametrize("compress", [False, True])
def test_generated_inputs_sampled_reference_and_gzipped_modules_run(tmp_path, compress,
                                                                   monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # where the workers decompress modules
    root = make_generated_batch(tmp_path / "b", ["ok", "wrong", "ok"], compress=compress)
    batch = load_batch(root)
    inputs, ref = load_data(batch.data["w0"])
    assert [x.shape for x in inputs] == [(6, 50)] * 2 and ref.shape == (28,)  # 300 / 11
    assert batch.candidates[0].record["task"] == {"workload": {"op": "add"}}  # looked up
    run_batch(root, backend="fake")
    lines = ordered_results(batch, root / "results.jsonl")
    assert [line["error"] for line in lines] == ["none", "wrong_result", "none"]
    assert list(scratch.iterdir()) == []  # decompressed copies are removed


def test_generated_inputs_that_differ_fail_the_batch(tmp_path):
    root = make_generated_batch(tmp_path / "b", ["ok"])
    edit_manifest(root, lambda d: d["data"]["w0"]["inputs"][1].update(sha256="0" * 64))
    with pytest.raises(BatchError, match=r"inputs\[1\]: the generated input's sha256"):
        run_batch(root, backend="fake")
    proc = subprocess.run([sys.executable, "-m", "tensortune.device_runner", str(root),
                           "--backend", "fake"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "does not draw the exporter's numbers" in proc.stderr
    assert not (root / "results.jsonl").exists()  # nothing ran


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["data"]["w0"]["inputs"][0]["generate"].update(seed=-1), "generate.seed"),
    (lambda d: d["data"]["w0"]["inputs"][0]["generate"].update(low=2.0), "low <= high"),
    (lambda d: d["data"]["w0"]["inputs"][0].update(sha256="abc"), "sha256"),
    (lambda d: d["data"]["w0"]["output"].update(stride=0), "stride must be >= 1"),
])
def test_bad_generate_specs_name_the_problem(tmp_path, edit, words):
    root = make_generated_batch(tmp_path / "b", ["ok"])
    edit_manifest(root, edit)
    with pytest.raises(BatchError) as err:
        load_batch(root)
    assert words in str(err.value)


def test_missing_manifest_and_cli_exit_code(tmp_path):
    with pytest.raises(BatchError, match="missing file"):
        load_batch(tmp_path)
    root = make_batch(tmp_path / "b", ["ok"])
    edit_manifest(root, lambda d: d.update(version=7))
    proc = subprocess.run([sys.executable, "-m", "tensortune.device_runner", str(root), "--backend", "fake"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "bad batch" in proc.stderr and "'version'" in proc.stderr


def test_arch_compatibility():
    assert arch_mismatch("sm_90", "sm_90") is None
    assert arch_mismatch("sm_80", "sm_86") is None
    assert arch_mismatch("sm_90a", "sm_90") is None
    assert "sm_80" in arch_mismatch("sm_90", "sm_80")
    assert arch_mismatch("sm_86", "sm_80") is not None
    assert arch_mismatch("sm_90", "fake") is None


@pytest.fixture
def server(tmp_path):
    srv = make_server("127.0.0.1", 0, workdir=str(tmp_path), backend="fake")
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _comparable(line: dict) -> dict:
    return {k: v for k, v in line.items() if k != "ts"}


def test_server_matches_the_local_run(tmp_path, server):
    srv, url = server
    root = make_batch(tmp_path / "b", ["ok", "wrong", "launch_error", "crash", "ok"])
    remote = run_remote(url, root, timeout_s=60)
    assert not (root / "results.jsonl").exists()  # the client sends, the server keeps nothing
    local_dir = tmp_path / "local"
    shutil.copytree(root, local_dir)
    run_batch(local_dir, backend="fake")
    local = ordered_results(load_batch(local_dir), local_dir / "results.jsonl")
    assert [_comparable(x) for x in remote] == [_comparable(x) for x in local]
    assert device_info(url) == {"device": "Fake GPU", "arch": "fake"}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("tt-batch-")] == []


def test_server_refuses_unsafe_uploads(tmp_path, server):
    srv, url = server
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../evil.txt")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    batches = url + "/v1/batches"
    with pytest.raises(RemoteError, match="answered 400: .*leaves the batch"):
        post(batches, buf.getvalue(), 30)
    assert not (tmp_path / "evil.txt").exists()
    with pytest.raises(RemoteError, match="answered 400: .*not a readable gzip tar"):
        post(batches, b"not a tar", 30)
    srv.max_body = 100
    with pytest.raises(RemoteError, match="answered 413"):
        post(batches, b"x" * 1000, 30)
    with pytest.raises(RemoteError, match="cannot reach http://127.0.0.1:9"):
        device_info("http://127.0.0.1:9", timeout_s=5)


def test_server_answers_a_bad_manifest_with_400(tmp_path, server):
    _, url = server
    root = make_batch(tmp_path / "b", ["ok"])
    edit_manifest(root, lambda d: d.update(format="x"))
    with pytest.raises(RemoteError, match="answered 400: .*'format'"):
        run_remote(url, root, timeout_s=30)
    root = make_generated_batch(tmp_path / "g", ["ok"])
    edit_manifest(root, lambda d: d["data"]["w0"]["inputs"][0].update(sha256="1" * 64))
    with pytest.raises(RemoteError, match="answered 400: .*generated input's sha256"):
        run_remote(url, root, timeout_s=30)
    assert len(run_remote(url, make_generated_batch(tmp_path / "h", ["ok"]), 30)) == 1


def test_no_tvm_and_nothing_else_from_tensortune(tmp_path):
    root = make_batch(tmp_path / "b", ["ok"])
    wrapper = (
        "import runpy, sys\n"
        f"sys.argv = ['device_runner', {str(root)!r}, '--backend', 'fake']\n"
        "try:\n"
        "    runpy.run_module('tensortune.device_runner', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "import tensortune.device_runner.server, tensortune.device_runner.client\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tvm', 'tvm_ffi', 'cupy')\n"
        "       or m.startswith('tensortune.') and not m.startswith('tensortune.device_runner')]\n"
        "print('BAD', bad)\n"
    )
    proc = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "BAD []" in proc.stdout


def test_imports_are_stdlib_numpy_or_relative():
    allowed = set(sys.stdlib_module_names) | {"numpy", "cupy"}
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [] if node.level else [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"
