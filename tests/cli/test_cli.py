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
