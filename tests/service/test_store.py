"""The service's SQLite state and the records index (no server)."""
from __future__ import annotations

import sqlite3

import pytest

from tensortune.measure.types import ErrorKind, MeasureInput, MeasureResult
from tensortune.records import RecordWriter
from tensortune.service.index import RecordsIndex, isa_key
from tensortune.service.store import Store
from tensortune.space import task_space
from tensortune.workload import Matmul, Task


def _task(mcpu: str) -> Task:
    return Task(Matmul(m=24, n=72, k=40), {"kind": "llvm", "mcpu": mcpu, "num-cores": 2})


def _configs(task, n):
    space = task_space(task)
    return [space.get(i) for i in range(n)]


def test_jobs_survive_a_new_connection_in_wal_mode(tmp_path):
    store = Store(tmp_path / "s.db")
    store.add_job("a", "m", "f" * 64, 2.5, 100, "host", False)
    store.add_trials("a", 8)
    store.update_job("a", state="running", tasks=[{"name": "t", "best_us": 3.0}], sla_met=True)
    store.add_event("a", "curve", {"trials": 8, "predicted_ms": 3.1})
    store.close()
    again = Store(tmp_path / "s.db")
    job = again.job("a")
    assert (job["state"], job["trials_done"], job["sla_met"]) == ("running", 8, True)
    assert job["tasks"] == [{"name": "t", "best_us": 3.0}]
    assert again.events("a", "curve")[0]["predicted_ms"] == 3.1
    assert [j["id"] for j in again.jobs(("running",))] == ["a"] and again.job("b") is None
    assert sqlite3.connect(tmp_path / "s.db").execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with pytest.raises(KeyError):
        again.update_job("a", id="b")  # only the state's columns change


def test_the_index_follows_the_records_and_looks_up_exact_then_family(tmp_path):
    zen4, spr, zen3 = _task("znver4"), _task("sapphirerapids"), _task("znver3")
    assert isa_key(zen4.target) == isa_key(spr.target) == "llvm/avx512"
    assert isa_key(zen3.target) == "llvm/avx2"
    records = tmp_path / "records.jsonl"
    index = RecordsIndex(Store(tmp_path / "s.db"), records)
    assert index.sync() == 0 and index.best(zen4) is None
    a, b, c = _configs(zen4, 3)
    with RecordWriter(records) as w:
        w.append(MeasureInput(zen4, a), MeasureResult((3e-6,)))
        w.append(MeasureInput(zen4, b), MeasureResult((1e-6,)))
        w.append(MeasureInput(zen4, c), MeasureResult((), ErrorKind.RUNTIME_ERROR, "boom"))
    with open(records, "ab") as f:
        f.write(b'{"v": 1, "torn')  # a line being written: not read until it ends
    assert index.sync() == 3
    best = index.best(zen4)
    assert (best.config, best.cost, best.match) == (b, 1e-6, "exact")
    family = index.best(spr)  # another AVX-512 CPU: the same family
    assert family.match == "family" and family.config == b
    assert index.best(zen3) is None  # AVX2: another ISA, never served an AVX-512 config
    with open(records, "ab") as f:
        f.write(b'"}\n')  # the torn line ends: read once, skipped as corrupt
    assert index.sync() == 1 and index.best(zen4).cost == 1e-6
    with RecordWriter(records) as w:  # its own record wins over the family's
        w.append(MeasureInput(spr, a), MeasureResult((5e-6,)))
    assert index.sync() == 1
    got = index.best(spr)
    assert (got.config, got.match) == (a, "exact")


def test_the_index_serves_the_steadiest_confirmed_config_as_the_tuner_builds_it(tmp_path):
    """Confirming timings (``tasks.confirm``) outrank a lucky first timing in the index as in
    ``records.best_record``, and survive a new connection."""
    from tensortune.records import best_record, load_records

    zen4 = _task("znver4")
    lucky, steady = _configs(zen4, 2)
    records = tmp_path / "records.jsonl"
    index = RecordsIndex(Store(tmp_path / "s.db"), records)
    with RecordWriter(records) as w:
        w.append(MeasureInput(zen4, lucky), MeasureResult((1.0e-6,)))
        w.append(MeasureInput(zen4, steady), MeasureResult((1.1e-6,)))
        for a, b in ((1.3e-6, 1.15e-6), (1.2e-6, 1.1e-6), (1.25e-6, 1.2e-6)):
            w.append(MeasureInput(zen4, lucky), MeasureResult((a,)), confirm=True)
            w.append(MeasureInput(zen4, steady), MeasureResult((b,)), confirm=True)
    assert index.sync() == 8
    best = index.best(zen4)
    assert (best.config, best.cost, best.match) == (steady, 1.15e-6, "exact")
    assert best.config == best_record(load_records(records), zen4).config
    again = RecordsIndex(Store(tmp_path / "s.db"), records)
    assert again.best(zen4).config == steady
