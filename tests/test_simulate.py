"""``schedule --simulate``: recorded stages replayed on more build nodes and devices; the
replay of a real scheduler run (sleeping stages) on its own resources predicts its makespan."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tensortune.cli import app
from tensortune.orchestrate.runs import write_report
from tensortune.orchestrate.simulate import Recorded, Trace, load_traces, simulate
from tensortune.tuner.stages import BUILD, MEASURE, PROPOSE

from .test_orchestrate import FakeResources, fake_job, run


def _trace(name, rounds=4, build=1.0, measure=2.0, size=8):
    groups = []
    for _ in range(rounds):
        groups += [(Recorded(PROPOSE, 8, 0.1),), (Recorded(BUILD, size, build),),
                   (Recorded(MEASURE, size, measure),)]
    return Trace(name, tuple(groups))


def test_a_replay_follows_the_rules_and_scales_with_devices_and_cores():
    one = [_trace("a")]
    alone = simulate(one, nodes=1, devices=1, cores_per_node=2, recorded_cores=2)
    assert alone.makespan_s == pytest.approx(4 * 3.1)  # a chain: nothing overlaps
    jobs = [_trace(f"j{i}") for i in range(4)]
    seq = simulate(jobs, 1, 1, 2, 2, "sequential")
    assert seq.makespan_s == pytest.approx(4 * 4 * 3.1)
    aware = simulate(jobs, 1, 1, 2, 2)
    # the device is the bottleneck: 16 measurements of 2 s, and builds hide behind them
    assert 32 <= aware.makespan_s < seq.makespan_s and aware.device_busy > 0.9
    more = simulate(jobs, 1, 4, 2, 2)
    assert more.makespan_s < aware.makespan_s * 0.6
    # builds spread over the cluster's cores: 8 candidates on 8 cores take a quarter
    wide = simulate(jobs, 4, 4, 2, 2)
    assert wide.makespan_s < more.makespan_s
    with pytest.raises(ValueError, match="cannot simulate policy 'concurrent'"):
        simulate(jobs, 1, 1, 2, 2, "concurrent")


def test_replaying_a_real_run_on_its_own_resources_predicts_its_makespan(tmp_path):
    jobs = [fake_job(f"j{i}", rounds=4, propose=0.01, build=0.06, measure=0.05)
            for i in range(3)]
    report = run("load-aware", jobs, FakeResources(cpu=1))
    write_report(report, tmp_path, "cores:1", [{"name": j.name} for j in jobs])
    traces, cores, real = load_traces(tmp_path)
    assert cores == 1 and len(traces) == 3 and real == pytest.approx(report.makespan_s, abs=1e-3)
    predicted = simulate(traces, 1, 1, cores, cores).makespan_s
    assert abs(predicted - real) / real < 0.10, (predicted, real)
    result = CliRunner().invoke(app, ["schedule", "--simulate", str(tmp_path), "--nodes", "1,4",
                                      "--sim-devices", "1,2", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output.strip().splitlines()[-1])["rows"]
    assert {(r["nodes"], r["devices"], r["policy"]) for r in rows} == {
        (n, d, p) for n in (1, 4) for d in (1, 2) for p in ("load-aware", "sequential")}
    bad = CliRunner().invoke(app, ["schedule", "--simulate", str(tmp_path / "none")])
    assert bad.exit_code != 0 and "has no events.jsonl" in " ".join(bad.output.split())
