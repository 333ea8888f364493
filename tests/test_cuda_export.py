"""CUDA candidates for a GPU host with no TVM: cubins with launch specs, exported batches,
tuning rounds cut at the measurement, and results imported into the records (no GPU here)."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tensortune.cli import app
from tensortune.device_runner.batch import load_batch, load_data
from tensortune.measure import LocalBuilder, MeasureInput
from tensortune.measure.cuda_build import launch_spec
from tensortune.measure.cuda_export import (ExportError, candidate_key, read_manifest,
                                            read_results, sample_stride, write_batch)
from tensortune.records import load_records
from tensortune.space import Config
from tensortune.tuner.offline import best_batch, propose_batch
from tensortune.workload import Conv2d, Matmul, Task

CUDA = {"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}}
# a 3-channel stem on an odd image, as users' models have
STEM = Task(Conv2d(n=1, c=3, h=37, w=37, filters=24, kh=3, kw=3, stride=2, padding=1), CUDA,
            template="cuda.generic")
STEM_CONFIG = Config(tile_b=(1, 1, 1, 1), tile_f=(1, 2, 12, 1), tile_y=(19, 1, 1, 1),
                     tile_x=(1, 1, 19, 1), tile_rc=(1, 3), tile_ry=(3, 1), tile_rx=(1, 3),
                     unroll=64, unroll_explicit=1)
MATMUL = Task(Matmul(m=48, n=40, k=24), CUDA, template="cuda.generic")
runner = CliRunner()


@pytest.fixture(scope="module")
def builder():
    with LocalBuilder(2, 120) as b:
        yield b


def test_build_writes_a_cubin_and_the_launch_spec_tvm_chose(builder):
    [build] = builder.build([MeasureInput(STEM, STEM_CONFIG)])
    assert build.error.value == "none", build.message
    with open(build.path, "rb") as f:
        assert f.read(4) == b"\x7fELF"  # a cubin is an ELF image of SASS
    spec = launch_spec(build.path)
    [kernel] = spec["kernels"]
    assert kernel["name"] == "main_kernel"
    # blocks: f 1 x y 19 x x 1; threads: f 12 x x 19 (the 2 virtual threads are unrolled)
    assert kernel["grid"] == [19, 1, 1] and kernel["block"] == [228, 1, 1]
    # every kernel parameter is one of data, weight, output
    assert sorted(kernel["args"]) == [0, 1, 2]
    assert len(spec["hardware_cuda"]) > 10 and spec["hardware_cuda"][0] == 0.0  # not invalid


def test_export_writes_a_self_contained_batch_and_refuses_a_second_one(builder, tmp_path):
    items = propose_batch(MATMUL, 3, tmp_path / "r.jsonl", builder, tuner="random")
    assert len(items) == 3
    path = write_batch(tmp_path / "b", items, seed=0, log=str(tmp_path / "r.jsonl"))
    manifest = read_manifest(path.parent)
    assert manifest["arch"] == "sm_90" and len(manifest["candidates"]) == 3
    assert manifest["version"] == 2 and list(manifest["tasks"]) == [MATMUL.key]
    [(name, data)] = manifest["data"].items()
    # the inputs are generated where the batch runs; only the reference travels
    assert np.load(path.parent / data["file"]).files == ["ref"]
    assert all(len(x["sha256"]) == 64 and x["generate"]["low"] == -1 for x in data["inputs"])
    [spec] = load_batch(path.parent).data.values()
    (a, b), ref = load_data(spec)
    np.testing.assert_allclose(ref, a @ b, rtol=1e-5, atol=1e-5)
    assert data["output"]["shape"] == [48, 40]
    for cand, (inp, _) in zip(manifest["candidates"], items):
        assert cand["key"] == candidate_key(inp) and cand["data"] == name
        assert (path.parent / cand["module"]).stat().st_size > 0
        assert Config.from_json(cand["record"]["config"]) == inp.config
        assert cand["record"]["task"]["template"] == "cuda.generic"  # the task, looked up
    with pytest.raises(ExportError, match="already holds a batch"):
        write_batch(tmp_path / "b", items)
    # stored inputs, a reference sampled every 11th element (2 KiB: 512 of 1920), gzipped cubins
    path = write_batch(tmp_path / "c", items, seed=0, generate=False, reference_bytes=2048,
                       compress=True)
    [spec] = load_batch(path.parent).data.values()
    (a, b), ref = load_data(spec)
    assert spec.output.stride == 11 and "generate" not in read_manifest(path.parent)[
        "data"][spec.name]["inputs"][0]
    np.testing.assert_allclose(ref, (a @ b).reshape(-1)[::11], rtol=1e-5, atol=1e-5)
    cubin = gzip.decompress((path.parent / "kernels" / "0.cubin.gz").read_bytes())
    assert cubin == open(items[0][1].path, "rb").read()


def test_sample_strides_are_primes_that_divide_no_dimension():
    assert sample_stride((48, 40), 4, 1 << 20) == 1
    assert sample_stride((1, 112, 112, 64), 4, 64 * 1024) == 53  # 802816 / 16384 -> 49 -> 53
    assert sample_stride((1, 7, 7, 11 * 13), 4, 2560) == 17  # 11 and 13 divide 143


def test_rounds_never_propose_a_config_twice_and_record_what_did_not_build(builder, tmp_path):
    log = tmp_path / "r.jsonl"
    first = propose_batch(MATMUL, 4, log, builder, tuner="random", settings=None)
    assert len(first) == 4 and all(b.error.value == "none" for _, b in first)
    # what failed to build is on record, so no later round proposes it again
    failed = [r for r in load_records(log)]
    assert all(not r.ok for r in failed)
    # results come back for the first round; the second round learns from them (xgb) and
    # proposes only configs nobody measured or holds
    batch = tmp_path / "b1"
    write_batch(batch, first, log=str(log))
    _fake_results(batch, [50e-6, 20e-6, 80e-6, 30e-6])
    result = runner.invoke(app, ["measure", "import", str(batch), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["added"] == 4
    second = propose_batch(MATMUL, 4, log, builder, tuner="xgb", features="knob")
    assert len(second) == 4
    taken = {r.config for r in load_records(log)}
    assert not taken & {i.config for i, _ in second}
    # the fastest measured one comes back first for a final timing
    [(inp, _)] = best_batch(MATMUL, 1, log, builder)
    assert inp.config == first[1][0].config


def test_import_appends_once_names_the_device_and_refuses_a_foreign_result(builder, tmp_path):
    log = tmp_path / "r.jsonl"
    items = propose_batch(MATMUL, 2, log, builder, tuner="random")
    batch = tmp_path / "b"
    write_batch(batch, items, log=str(log))
    before = len(load_records(log))
    _fake_results(batch, [10e-6, None])  # the second is still running: not imported
    for _ in range(2):  # importing twice adds nothing the second time
        result = runner.invoke(app, ["measure", "import", str(batch)])
        assert result.exit_code == 0, result.output
    records = load_records(log)[before:]
    assert len(records) == 1
    assert records[0].ok and records[0].costs == (10e-6,) * 3 and records[0].device == "Fake H100"
    done, missing = read_results(batch)
    assert len(done) == 1 and missing == [1]
    lines = (batch / "results.jsonl").read_text().splitlines()
    line = json.loads(lines[0])
    line["key"] = "0" * 16
    (batch / "results.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(ExportError, match="names key"):
        read_results(batch)


def test_export_cli_builds_each_workload_and_checks_its_arguments(tmp_path):
    log = tmp_path / "r.jsonl"
    matmul = json.dumps({"op": "matmul", "m": 64, "n": 64, "k": 32})
    result = runner.invoke(app, ["measure", "export", matmul, "--batch", "2", "--tuner",
                                 "random", "--out", str(tmp_path / "b"), "--log", str(log),
                                 "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["candidates"] == 2 and summary["log"] == str(log)
    assert read_manifest(tmp_path / "b")["log"] == str(log)
    bad = runner.invoke(app, ["measure", "export", "conv2d_C99", "--out", str(tmp_path / "c")])
    assert bad.exit_code == 2 and "neither a benchmark operator" in flat(bad.output)
    cpu = runner.invoke(app, ["measure", "export", matmul, "--target", "llvm:znver3",
                              "--out", str(tmp_path / "c")])
    assert cpu.exit_code == 2 and "CUDA targets" in flat(cpu.output)
    again = runner.invoke(app, ["measure", "export", matmul, "--out", str(tmp_path / "b")])
    assert again.exit_code == 2 and "already holds a batch" in flat(again.output)


def test_tune_op_asks_for_a_gpu_device_for_cuda_targets():
    result = runner.invoke(app, ["tune-op", "matmul", "--m", "16", "--n", "16", "--k", "16",
                                 "--target", "cuda:sm_90"])
    assert result.exit_code == 2 and "--device cuda:http://" in flat(result.output)


def flat(text: str) -> str:
    """Console output without the line breaks rich puts in long messages."""
    return " ".join(text.split())


def _fake_results(batch, costs) -> None:
    """Result lines as the device runner writes them (None: not timed yet)."""
    manifest = read_manifest(batch)
    with open(batch / "results.jsonl", "w") as f:
        for cand, cost in zip(manifest["candidates"], costs):
            if cost is None:
                continue
            f.write(json.dumps({"v": 1, "index": cand["index"], "key": cand["key"],
                                "costs": [cost] * 3, "error": "none", "message": "",
                                "verified": True, "device": "Fake H100", "ts": 1.0}) + "\n")


def test_an_nvcc_past_its_time_is_killed_with_its_children(tmp_path):
    """nvcc's front end is its child: a timeout must not leave it compiling."""
    import subprocess
    import time

    from tensortune.toolchain import NvccError, run_tool

    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\nsleep 37.25 &\nwait\n")
    fake.chmod(0o755)
    start = time.perf_counter()
    with pytest.raises(NvccError):
        run_tool([str(fake)], timeout_s=1)
    assert time.perf_counter() - start < 10
    for _ in range(50):  # a loaded host may take a while to reap the killed group
        left = subprocess.run(["pgrep", "-f", "sleep 37.25"], capture_output=True, text=True)
        if not left.stdout.strip():
            break
        time.sleep(0.1)
    assert left.stdout.strip() == ""
