"""A whole CUDA model tuned in measured rounds for a GPU elsewhere: every task exported in one
batch (the shipped model's picks first, inputs generated on the GPU host), timed by the device
runner's fake backend, imported, built from the best records; the next round learns from them."""
import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tensortune.cli import app
from tensortune.device_runner import load_batch, run_batch
from tensortune.measure.builder import job_task
from tensortune.measure.cuda_export import read_manifest
from tensortune.records import best_record, load_records
from tensortune.tuner.offline import allocate

from .test_cuda_model import Small  # the same small CNN as the hardware-free tests

runner = CliRunner()


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TENSORTUNE_BUILD_WORKERS", "2")
    torch.manual_seed(0)
    path = tmp_path / "small.onnx"
    torch.onnx.export(Small().eval(), (torch.randn(1, 3, 12, 12),), str(path),
                      input_names=["x"], dynamo=False)
    return tmp_path, path


def last_json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_model_round_trip_export_run_import_build_and_learn(home):
    tmp, onnx = home
    log = tmp / "cuda.jsonl"
    first = last_json(runner.invoke(app, [
        "measure", "export", "--model", str(onnx), "--target", "cuda:sm_90", "--batch", "2",
        "--pool", "1.5", "--out", str(tmp / "b1"), "--log", str(log), "--json"]))
    tasks = first["tasks"]
    assert tasks and all(t["built"] == 2 and t["chosen"].startswith("pretrained") for t in tasks)
    assert all(t["basis"] == "roofline" for t in tasks)
    # a prediction is a throughput: every task that computes has one (a layout copy has none)
    assert all(t["predicted"] or "transpose" in t["task"] for t in tasks)
    assert sum(bool(t["predicted"]) for t in tasks) >= 2
    assert sum(t["share"] for t in tasks) == pytest.approx(1, abs=1e-3)
    manifest = read_manifest(tmp / "b1")
    assert manifest["version"] == 2 and first["candidates"] == 2 * len(tasks)
    assert all(m.endswith(".cubin.gz") for m in (c["module"] for c in manifest["candidates"]))
    for data in manifest["data"].values():  # no weights travel: generated, checked by sha256
        assert all("generate" in x and "sha256" in x for x in data["inputs"])
        assert np.load(tmp / "b1" / data["file"]).files == ["ref"]

    summary = run_batch(tmp / "b1", backend="fake")  # real cubins: the fake computes the ref
    assert summary["counts"] == {"none": first["candidates"]}
    imported = last_json(runner.invoke(app, ["measure", "import", str(tmp / "b1"), "--json"]))
    assert imported["added"] == first["candidates"] and imported["log"] == str(log)
    records = load_records(log)
    picked = {}  # each task's best record, found by the task the batch names
    for cand in load_batch(tmp / "b1").candidates:
        task = job_task(cand.record["task"])
        best = best_record(records, task)
        assert best is not None and best.device == "Fake GPU (fake)" and best.ok
        picked[task.key] = best

    built = last_json(runner.invoke(app, [
        "tune-model", str(onnx), "--target", "cuda:sm_90", "--records", str(log), "--json"]))
    measured = {r["key"]: r for r in built["tasks"] if r["source"] == "records"}
    assert set(measured) == set(picked) == {t["key"] for t in tasks}
    for key, record in picked.items():
        assert measured[key]["measured_us"] == pytest.approx(record.cost * 1e6)
    assert built["from_records"] == len(picked) and built["fallback"] == \
        len(built["tasks"]) - len(picked)
    run_dir = tmp / "home" / "runs" / built["run_id"]
    assert (run_dir / "module").is_dir()
    assert json.loads((run_dir / "run.json").read_text())["results"]["tuning"]["mode"] == \
        "records"

    second = last_json(runner.invoke(app, [
        "measure", "export", "--model", str(onnx), "--target", "cuda:sm_90", "--budget",
        str(len(tasks) + 1), "--out", str(tmp / "b2"), "--log", str(log), "--json"]))
    assert all(t["chosen"] == "xgb" and t["basis"] == "measured" for t in second["tasks"])
    assert sum(t["built"] for t in second["tasks"]) == len(tasks) + 1
    # the biggest task by measured time gets the extra candidate
    biggest = max(second["tasks"], key=lambda t: t["share"])
    assert biggest["built"] == 2
    again = {json.dumps(c["record"]["config"], sort_keys=True)
             for c in read_manifest(tmp / "b2")["candidates"]}
    before = {json.dumps(c["record"]["config"], sort_keys=True) for c in manifest["candidates"]}
    assert not again & before


def test_export_refuses_what_it_cannot_do(home):
    tmp, onnx = home
    none = runner.invoke(app, ["measure", "export", "--out", str(tmp / "x")])
    assert none.exit_code == 2 and "name workloads or --model" in " ".join(none.output.split())
    bad = runner.invoke(app, ["measure", "export", "--model", "nosuchnet", "--out",
                              str(tmp / "x")])
    assert bad.exit_code == 2 and "neither a .onnx file nor a zoo model" in \
        " ".join(bad.output.split())
    budget = runner.invoke(app, ["measure", "export", "matmul_512", "--budget", "10", "--out",
                                 str(tmp / "x")])
    assert budget.exit_code == 2 and "with --model" in " ".join(budget.output.split())
    both = runner.invoke(app, ["tune-model", str(onnx), "--target", "cuda:sm_90", "--records",
                               str(tmp / "nothing.jsonl")])
    assert both.exit_code == 2 and "no such file" in " ".join(both.output.split())


def test_allocate_splits_a_budget_by_share_with_a_floor():
    assert allocate([0.7, 0.2, 0.1], 10, floor=1) == [6, 2, 2]  # 1 each, 7 by share
    assert sum(allocate([0.5, 0.3, 0.2], 7, floor=2)) == 7
    assert allocate([0.9, 0.1], 1, floor=1) == [1, 0]  # too few for the floor: the biggest
    assert allocate([0.0, 0.0], 4) == [2, 2]
    assert allocate([], 5) == []
