"""The command line: bad input is refused with a message naming the problem; a tiny run works."""
import json

from typer.testing import CliRunner

from tensortune.cli import app

runner = CliRunner()


def test_unknown_operator_is_named():
    res = runner.invoke(app, ["tune-op", "softmax", "--trials", "1"])
    assert res.exit_code == 2 and "unknown operator 'softmax'" in res.output


def test_missing_shape_options_are_named():
    res = runner.invoke(app, ["tune-op", "matmul", "--m", "4"])
    assert res.exit_code == 2 and "--n" in res.output and "--k" in res.output


def test_bad_shapes_are_refused():
    res = runner.invoke(app, ["tune-op", "conv2d", "--input", "1,3,4", "--filters", "8"])
    assert res.exit_code == 2 and "--input must have 4 values" in res.output
    res = runner.invoke(app, ["tune-op", "matmul", "--m", "0", "--n", "4", "--k", "4"])
    assert res.exit_code == 2 and "m must be a positive integer" in res.output
    res = runner.invoke(app, ["tune-op", "conv2d", "--input", "1,6,8,8", "--filters", "8",
                              "--groups", "4"])
    assert res.exit_code == 2 and "groups=4" in res.output


def test_unknown_tuner_is_named():
    res = runner.invoke(app, ["tune-op", "matmul", "--m", "4", "--n", "4", "--k", "4",
                              "--tuner", "magic"])
    assert res.exit_code == 2 and "unknown tuner 'magic'" in res.output


def test_tiny_run_ends_with_json_summary_and_best_lists_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORTUNE_MIN_REPEAT_MS", "2")
    monkeypatch.setenv("TENSORTUNE_REPEAT", "2")
    log = tmp_path / "r.jsonl"
    res = runner.invoke(app, ["tune-op", "matmul", "--m", "32", "--n", "32", "--k", "32",
                              "--trials", "4", "--tuner", "random", "--log", str(log), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert {"best_us", "gflops", "trials", "tune_s", "errors"} <= set(summary)
    assert summary["trials"] == 4 and summary["best_us"] > 0
    assert len(log.read_text().splitlines()) >= 4
    res = runner.invoke(app, ["best", str(log), "--json"])
    assert res.exit_code == 0
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert rows[0]["workload"].startswith("matmul(m=32")


def test_unknown_search_is_named():
    res = runner.invoke(app, ["tune-op", "matmul", "--m", "4", "--n", "4", "--k", "4",
                              "--search", "tabu"])
    assert res.exit_code == 2 and "unknown search 'tabu'" in res.output


def test_bad_prescreen_is_refused():
    base = ["tune-op", "matmul", "--m", "4", "--n", "4", "--k", "4"]
    res = runner.invoke(app, base + ["--prescreen", "vibes"])
    assert res.exit_code == 2 and "unknown feature extractor" in res.output and "vibes" in res.output
    res = runner.invoke(app, base + ["--tuner", "random", "--prescreen", "itervar"])
    assert res.exit_code == 2 and "--prescreen needs a model-guided tuner" in res.output


def test_tune_model_compares_with_onnxruntime_and_hardware_free_times_nothing(tmp_path,
                                                                             monkeypatch):
    import json

    torch = __import__("pytest").importorskip("torch")
    from tests.test_session import _tiny

    monkeypatch.setenv("TENSORTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TENSORTUNE_MIN_REPEAT_MS", "1")
    module, inputs = _tiny()
    path = tmp_path / "tiny.onnx"
    torch.onnx.export(module, inputs, str(path), input_names=["x"], dynamo=False)
    res = runner.invoke(app, ["tune-model", str(path), "--trials", "8", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output.strip().splitlines()[-1])
    assert summary["trials"] == summary["timed"] == 8
    # the heavy tasks' best configs timed again after the search (tasks.confirm)
    assert summary["confirmed"] > 0 and "confirmed the heavy tasks' best" in res.output
    assert summary["onnxruntime_ms"] > 0 and summary["untuned_ms"] > 0
    assert "ONNX Runtime" in res.output
    assert summary["default_functions"] == [] and "none on TVM's default" in res.output
    res = runner.invoke(app, ["profile", summary["run_id"], "--repeat", "2", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output.strip().splitlines()[-1])
    assert report["default_functions"] == []
    assert {f["schedule"] for f in report["functions"]} <= {"tuned", "seeded", "fallback"}
    res = runner.invoke(app, ["tune-model", str(path), "--hardware-free", "--no-compare", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output.strip().splitlines()[-1])
    assert summary["timed"] == 0 and summary["compiled"] > 0 and summary["tuned_ms"] > 0
    res = runner.invoke(app, ["tune-model", str(path), "--verify-top", "2"])
    assert res.exit_code == 2 and "--hardware-free" in res.output
    res = runner.invoke(app, ["tune-model", str(path), "--hardware-free", "--effort", "fast",
                              "--no-compare", "--json"])
    assert res.exit_code == 0, res.output
    fast = json.loads(res.output.strip().splitlines()[-1])
    assert fast["timed"] == 0 and 0 < fast["compiled"] < summary["compiled"]
    res = runner.invoke(app, ["tune-model", str(path), "--hardware-free", "--effort", "lazy"])
    assert res.exit_code == 2 and "--effort is one of full, fast" in res.output


def test_tune_op_hardware_free_compiles_but_times_only_the_verified(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORTUNE_MIN_REPEAT_MS", "2")
    log = tmp_path / "r.jsonl"
    base = ["tune-op", "matmul", "--m", "64", "--n", "64", "--k", "64", "--log", str(log),
            "--json", "--hardware-free"]
    res = runner.invoke(app, base)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["timed"] == 0 and summary["compiled"] > 0 and summary["predicted_us"] > 0
    assert summary["config"] and not log.exists()
    res = runner.invoke(app, base + ["--verify-top", "2"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["timed"] == 2 and summary["best_us"] > 0
    assert len(log.read_text().splitlines()) == 2
    res = runner.invoke(app, ["tune-op", "matmul", "--m", "4", "--n", "4", "--k", "4",
                              "--verify-top", "2"])
    assert res.exit_code == 2 and "--hardware-free" in res.output


def test_targets_are_parsed_and_foreign_ones_are_not_timed(tmp_path):
    res = runner.invoke(app, ["tune-op", "matmul", "--m", "8", "--n", "8", "--k", "8",
                              "--target", "llvm:zen9"])
    assert res.exit_code == 2 and "LLVM knows no x86 CPU 'zen9'" in res.output
    res = runner.invoke(app, ["tune-op", "matmul", "--m", "8", "--n", "8", "--k", "8",
                              "--target", "cuda:sm_90"])
    assert res.exit_code == 2 and "CUDA" in res.output
    # a CPU with instructions this one lacks (AVX-512 on an AVX2 host, or AMX elsewhere) can
    # still be tuned without timing: its config comes from the model
    foreign = "sapphirerapids"
    from tensortune.workload import missing_host_features

    if missing_host_features({"kind": "llvm", "mcpu": foreign}):
        base = ["tune-op", "matmul", "--m", "64", "--n", "64", "--k", "64", "--target",
                f"llvm:{foreign}", "--log", str(tmp_path / "f.jsonl"), "--trials", "4"]
        res = runner.invoke(app, base)
        assert res.exit_code == 2 and "lacks" in res.output
        res = runner.invoke(app, base + ["--hardware-free", "--json"])
        assert res.exit_code == 0, res.output


def small_dataset(path, tasks: int, per_task: int):
    """The first ``tasks`` tasks of the shipped Zen 3 dataset, ``per_task`` records each (the
    whole file takes minutes to featurize)."""
    import gzip
    from pathlib import Path

    kept: dict[str, int] = {}
    with gzip.open(Path(__file__).resolve().parents[2] / "data" / "cpu-zen3.jsonl.gz",
                   "rt") as src, gzip.open(path, "wt") as dst:
        for line in src:
            key = json.loads(line)["task"]
            if (key in kept or len(kept) < tasks) and kept.get(key, 0) < per_task:
                kept[key] = kept.get(key, 0) + 1
                dst.write(line)
    return path


def test_costmodel_train_writes_a_json_model_with_provenance(tmp_path):
    import hashlib

    from tensortune.cost_model import PretrainedModel
    from tensortune.dataset import load_dataset
    from tensortune.measure.types import MeasureInput

    data = small_dataset(tmp_path / "small.jsonl.gz", tasks=4, per_task=40)
    out = tmp_path / "m.json"
    res = runner.invoke(app, ["costmodel", "train", "--dataset", str(data), "--features",
                              "itervar", "--out", str(out), "--no-store"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    source = doc["provenance"]["datasets"][0]
    assert source["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert source["tasks"] == 4 and doc["provenance"]["features"] == "itervar"
    assert doc["provenance"]["tvm"].startswith("0.27")
    model = PretrainedModel.load(out)
    task = load_dataset(data).tasks[0]
    scores = model.predict(list(task.inputs[:5]))
    assert scores.shape == (5,) and len(set(scores.round(6))) > 1
    assert isinstance(task.inputs[0], MeasureInput)
    res = runner.invoke(app, ["costmodel", "train", "--dataset", str(data), "--out",
                              str(out), "--holdout"])
    assert res.exit_code != 0 and "--holdout needs a dataset of several models" in res.output
