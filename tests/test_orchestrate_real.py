"""The scheduler with real builds and timings: cores reserved for timing, records and reports
written, the command line's jobs files and grids checked, a tiny grid experiment."""
from __future__ import annotations

import csv
import dataclasses
import json
import os

import pytest
from typer.testing import CliRunner

from tensortune.cli import app
from tensortune.records import load_records
from tensortune.orchestrate import (DeviceSpec, JobsFileError, Layout, Resources, load_jobs,
                                    parse_devices)
from tensortune.orchestrate.experiment import GridError, load_grid, run_grid
from tensortune.orchestrate.runs import run_schedule
from tensortune.settings import MeasureSettings, Settings

FAST = MeasureSettings(build_workers=2, number=2, repeat=2, min_repeat_ms=1, run_timeout_s=20)
MM = {"op": "matmul", "m": 32, "n": 24, "k": 40}
CONV = {"op": "conv2d", "n": 1, "c": 3, "h": 15, "w": 15, "filters": 8, "kh": 3, "kw": 3,
        "stride": 2, "padding": 1}
two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")


def settings(tmp_path):
    return Settings(measure=FAST, home=tmp_path / "home")


@two_cores
def test_reserved_core_times_and_the_other_builds(tmp_path):
    layout = Layout.plan([DeviceSpec.parse("cores:1")])
    res = Resources(layout, settings(tmp_path))
    try:
        res.builder._pool.start()
        res.devices[0].runner._pool.start()
        builders = {frozenset(os.sched_getaffinity(w.process.pid))
                    for w in res.builder._pool._workers}
        timer = {frozenset(os.sched_getaffinity(w.process.pid))
                 for w in res.devices[0].runner._pool._workers}
    finally:
        res.close()
    assert builders == {frozenset(layout.cpus)}
    assert timer == {frozenset(layout.devices[0][1])}
    assert not set(layout.cpus) & set(layout.devices[0][1])
    # the concurrent policy's own runners time with the device's threads, as the jobs compile
    builder, runner = Resources(layout, settings(tmp_path)).private_tools()
    assert runner.settings.threads == 1 and runner.cpus is None


@two_cores
def test_two_jobs_load_aware_on_a_reserved_core_record_every_trial(tmp_path):
    specs = load_jobs({"jobs": [
        {"name": "mm", "kind": "tune-op", "workload": MM, "trials": 6, "tuner": "random"},
        {"name": "conv", "kind": "tune-op", "workload": CONV, "trials": 6, "tuner": "random"}]})
    out = tmp_path / "run"
    report = run_schedule(specs, "load-aware", "cores:1", settings(tmp_path), out)
    assert [j.state for j in report.jobs] == ["done", "done"]
    for name in ("mm", "conv"):
        records = load_records(out / f"{name}.jsonl")
        assert len(records) == 6 and all(r.target["num-cores"] == 1 for r in records)
        assert sum(r.error.value == "none" for r in records) >= 3
    assert all(j.summary["trials"] == 6 and j.summary["best_us"] > 0 for j in report.jobs)
    measures = sorted((e for e in report.events if e.kind == "measure"), key=lambda e: e.start)
    assert all(e.resource == "cores:1" for e in measures)
    assert all(b.start >= a.end - 1e-6 for a, b in zip(measures, measures[1:]))
    saved = json.loads((out / "report.json").read_text())
    assert saved["policy"] == "load-aware" and set(saved["resources"]) == {"cpu", "cores:1"}
    assert len((out / "events.jsonl").read_text().splitlines()) == len(report.events)


def test_jobs_files_are_checked_field_by_field(tmp_path):
    cases = [
        ({}, "at least one job"),
        ({"jobs": [{"kind": "tune-op"}]}, "non-empty string \"name\""),
        ({"jobs": [{"name": "a", "kind": "tune-graph", "trials": 1}]}, "\"kind\" must be one of"),
        ({"jobs": [{"name": "a", "kind": "tune-op", "trials": 0, "workload": MM}]},
         "\"trials\" must be a positive integer"),
        ({"jobs": [{"name": "a", "kind": "tune-op", "trials": 4,
                    "workload": {"op": "softmax"}}]}, "unknown operator 'softmax'"),
        ({"jobs": [{"name": "a", "kind": "tune-model", "trials": 4, "model": "resnet19"}]},
         "neither a zoo model"),
        ({"jobs": [{"name": "a", "kind": "tune-op", "trials": 4, "workload": MM,
                    "model": "resnet18"}]}, "unknown field(s) model"),
        ({"jobs": [{"name": "a", "kind": "tune-op", "trials": 4, "workload": MM}] * 2},
         "used twice"),
    ]
    for data, message in cases:
        with pytest.raises(JobsFileError) as err:
            load_jobs(data)
        assert message in str(err.value), (data, str(err.value))
    with pytest.raises(ValueError, match="at most one of local and cores:N"):
        parse_devices("local,cores:1")
    with pytest.raises(ValueError, match="unknown device 'gpu:0'"):
        parse_devices("gpu:0")


def test_the_command_refuses_bad_input_by_name(tmp_path):
    cli = CliRunner()
    bad = tmp_path / "jobs.json"
    bad.write_text("{not json")
    res = cli.invoke(app, ["schedule", str(bad)])
    # rich wraps the message to the terminal's width, and a long temporary path moves the break
    assert res.exit_code == 2 and "is not JSON" in " ".join(res.output.split())
    bad.write_text(json.dumps({"jobs": [{"name": "a", "kind": "tune-op", "trials": 2,
                                         "workload": MM}]}))
    res = cli.invoke(app, ["schedule", str(bad), "--policy", "fastest"])
    assert res.exit_code == 2 and "unknown policy 'fastest'" in " ".join(res.output.split())
    res = cli.invoke(app, ["schedule", str(bad), "--devices", "cores:64"])
    assert res.exit_code == 2 and "leaves no core to build on" in " ".join(res.output.split())


def test_the_command_runs_a_jobs_file_and_ends_with_json(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORTUNE_MIN_REPEAT_MS", "1")
    monkeypatch.setenv("TENSORTUNE_REPEAT", "2")
    monkeypatch.setenv("TENSORTUNE_HOME", str(tmp_path / "home"))
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps({"jobs": [{"name": "mm", "kind": "tune-op", "workload": MM,
                                          "trials": 4, "tuner": "random"}]}))
    res = CliRunner().invoke(app, ["schedule", str(jobs), "--policy", "sequential",
                                   "--out", str(tmp_path / "out"), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["policy"] == "sequential" and summary["makespan_s"] > 0
    (job,) = summary["jobs"]
    assert job["name"] == "mm" and job["trials"] == 4 and job["best_us"] > 0
    assert summary["resources"]["local"] > 0


def test_grids_are_checked_and_a_tiny_grid_writes_a_row_per_combination_and_plots(tmp_path):
    with pytest.raises(GridError, match="unknown key\\(s\\) model"):
        load_grid({"model": ["resnet18"], "trials": [4]})
    with pytest.raises(GridError, match="\"trials\" must be a non-empty list"):
        load_grid({"models": ["resnet18"]})
    with pytest.raises(GridError, match="unknown policy 'fifo'"):
        load_grid({"models": ["resnet18"], "trials": [4], "policies": ["fifo"]})
    grid = load_grid({"models": [MM, CONV], "tuners": ["random"], "trials": [3, 5],
                      "policies": ["sequential", "load-aware"], "devices": "local"})
    assert grid.size == 8
    rows = run_grid(grid, dataclasses.replace(settings(tmp_path)), tmp_path / "exp")
    assert len(rows) == 8
    with open(tmp_path / "exp" / "results.csv") as f:
        saved = list(csv.DictReader(f))
    assert len(saved) == 8 and {r["policy"] for r in saved} == {"sequential", "load-aware"}
    assert all(r["state"] == "done" and float(r["best_us"]) > 0 for r in saved)
    assert sorted(int(r["trials"]) for r in saved) == [3, 3, 3, 3, 5, 5, 5, 5]
    for png in ("results.png", "timeline-sequential.png", "timeline-load-aware.png"):
        assert (tmp_path / "exp" / png).stat().st_size > 1000
