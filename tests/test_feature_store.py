"""Stored feature rows and packed (gzip) record logs and datasets."""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from tensortune.dataset import TaskInfo, features_path, load_dataset, manifest_path, working_log
from tensortune.dataset import collect_dataset
from tensortune.features import FeatureExtractor, make_extractor
from tensortune.features.store import FeatureStore, fill, packed
from tensortune.measure.types import MeasureInput, MeasureResult
from tensortune.records import RecordWriter, load_records, pack_records
from tensortune.settings import MeasureSettings, SearchSettings, Settings
from tensortune.space import task_space
from tensortune.workload import Matmul, Task, default_target

FAST = Settings(measure=MeasureSettings(number=1, repeat=2, min_repeat_ms=1, run_timeout_s=10),
                search=SearchSettings(batch_size=4, sa_chains=8, sa_steps=10))


def _inputs(n=6, m=32):
    task = Task(Matmul(m=m, n=m, k=m), default_target(2))
    space = task_space(task)
    return [MeasureInput(task, space.get(i)) for i in range(n)]


class Counting(FeatureExtractor):
    """A real extractor that counts the rows it computes."""

    def __init__(self, name="knob"):
        self.inner = make_extractor(name)
        self.name = self.inner.name
        self.calls = 0

    def extract(self, inputs):
        self.calls += len(inputs)
        return self.inner.extract(inputs)


def test_stored_rows_are_computed_once_and_survive_a_new_store(tmp_path):
    inputs = _inputs()
    counting = Counting()
    stored = FeatureStore(tmp_path).wrap(counting)
    first = stored.extract(inputs[:4])
    assert counting.calls == 4
    both = stored.extract(inputs)  # only the two new rows are computed
    assert counting.calls == 6
    np.testing.assert_array_equal(both[:4], first)
    again = Counting()
    reopened = FeatureStore(tmp_path).wrap(again)
    assert len(reopened) == 6
    np.testing.assert_allclose(reopened.extract(inputs), both, rtol=1e-5)
    assert again.calls == 0
    assert stored.extract([]).shape[0] == 0
    read_only = FeatureStore(tmp_path, read_only=True).wrap(Counting())
    read_only.extract(_inputs(8))
    assert len(read_only) == 8 and len(FeatureStore(tmp_path).wrap(Counting())) == 6


def test_rows_of_another_store_are_served_but_never_written_there(tmp_path):
    inputs = _inputs()
    FeatureStore(tmp_path / "history").wrap(Counting()).extract(inputs[:4])
    counting = Counting()
    both = FeatureStore(tmp_path / "mine", also=[tmp_path / "history"]).wrap(counting)
    assert len(both) == 4
    rows = both.extract(inputs)
    assert counting.calls == 2  # only the rows neither store has
    np.testing.assert_allclose(rows, make_extractor("knob").extract(inputs), rtol=1e-5)
    assert len(FeatureStore(tmp_path / "history").wrap(Counting())) == 4
    assert len(FeatureStore(tmp_path / "mine").wrap(Counting())) == 2


def test_a_torn_last_line_is_skipped_and_recomputed(tmp_path):
    inputs = _inputs(3)
    store = FeatureStore(tmp_path)
    stored = store.wrap(Counting())
    stored.extract(inputs)
    path = store.path_for(stored)
    text = path.read_text()
    path.write_text(text[: len(text) - 15])  # a killed writer
    counting = Counting()
    reopened = FeatureStore(tmp_path).wrap(counting)
    assert len(reopened) == 2
    reopened.extract(inputs)
    assert counting.calls == 1


def test_packed_rows_are_served_and_new_rows_append_beside_them(tmp_path):
    inputs = _inputs(6)
    store = FeatureStore(tmp_path)
    stored = store.wrap(Counting())
    first = stored.extract(inputs[:4])
    path = store.path_for(stored)
    assert store.pack() == {path.name: 4}
    assert not path.exists() and packed(path).exists()
    with gzip.open(packed(path), "rt") as f:
        assert len(f.read().splitlines()) == 4
    counting = Counting()
    reopened = FeatureStore(tmp_path).wrap(counting)
    np.testing.assert_allclose(reopened.extract(inputs[:4]), first, rtol=1e-5)
    reopened.extract(inputs)  # two rows computed and appended to the plain file
    assert counting.calls == 2 and len(path.read_text().splitlines()) == 2
    assert FeatureStore(tmp_path).pack() == {path.name: 6}  # merged: nothing lost, nothing twice
    assert not path.exists() and len(FeatureStore(tmp_path).wrap(Counting())) == 6
    assert FeatureStore(tmp_path).pack() == {}  # nothing appended since


def test_a_truncated_packed_store_keeps_its_readable_rows(tmp_path, caplog):
    store = FeatureStore(tmp_path)
    stored = store.wrap(Counting())
    stored.extract(_inputs(40))
    store.pack()
    gz = packed(store.path_for(stored))
    data = gz.read_bytes()
    gz.write_bytes(data[: len(data) // 2])  # a damaged copy
    reopened = FeatureStore(tmp_path).wrap(Counting())
    assert 0 < len(reopened) < 40
    assert "unreadable gzip data" in caplog.text
    with pytest.raises(ValueError, match="read-only feature store is not packed"):
        FeatureStore(tmp_path, read_only=True).pack()


@pytest.mark.parametrize("jobs", [1, 2])
def test_fill_computes_only_missing_rows(tmp_path, jobs):
    inputs = _inputs(5)
    store = FeatureStore(tmp_path)
    store.wrap(make_extractor("knob")).extract(inputs[:2])
    seen = []
    assert fill(store, "knob", inputs, jobs=jobs, chunk=2, on_chunk=seen.append) == 3
    assert sum(seen) == 3
    stored = FeatureStore(tmp_path).wrap(make_extractor("knob"))
    assert all(inp in stored for inp in inputs)
    np.testing.assert_allclose(stored.extract(inputs), make_extractor("knob").extract(inputs))
    assert fill(store, "knob", inputs, jobs=jobs) == 0


def test_fill_compiles_hardware_rows_in_workers(tmp_path):
    inputs = _inputs(4)
    store = FeatureStore(tmp_path)
    assert fill(store, "hardware", inputs, jobs=2, chunk=3) == 4
    stored = FeatureStore(tmp_path).wrap(make_extractor("hardware"))
    assert all(inp in stored for inp in inputs)
    in_process = make_extractor("hardware")
    in_process.workers = 0
    np.testing.assert_allclose(stored.extract(inputs), in_process.extract(inputs), rtol=1e-5)


def test_a_feature_bank_tells_whether_costly_rows_are_stored(tmp_path):
    from tensortune.evaluation import FeatureBank
    from tensortune.dataset import TaskData

    inputs = _inputs(3)
    info = TaskInfo(inputs[0].task.key, "mm", "matmul", "records")
    data = TaskData(info, inputs[0].task, tuple(inputs),
                    tuple(MeasureResult(costs=(1e-5,)) for _ in inputs))
    store = FeatureStore(tmp_path)
    fill(store, "hardware", inputs[:2])
    bank = FeatureBank(FeatureStore(tmp_path, read_only=True))
    assert bank.stored("knob+itervar", data)  # nothing costly to store
    assert not bank.stored("itervar+hardware", data)
    fill(store, "hardware", inputs[2:])
    assert FeatureBank(FeatureStore(tmp_path, read_only=True)).stored("itervar+hardware", data)
    assert not FeatureBank().stored("hardware", data)  # no store at all


def _write_log(path, inputs):
    with RecordWriter(path) as w:
        for i, inp in enumerate(inputs):
            w.append(inp, MeasureResult(costs=(1e-5 * (i + 1),)))


def test_packed_logs_load_like_plain_ones(tmp_path):
    inputs = _inputs(4)
    plain = tmp_path / "log.jsonl"
    _write_log(plain, inputs)
    gz = pack_records(plain, tmp_path / "log.jsonl.gz")
    assert gz.stat().st_size < plain.stat().st_size
    assert load_records(gz) == load_records(plain)
    with pytest.raises(ValueError, match="uncompressed"):
        RecordWriter(gz)


def test_a_truncated_packed_log_is_reported_not_fatal(tmp_path):
    plain = tmp_path / "log.jsonl"
    _write_log(plain, _inputs(6))
    data = gzip.compress(plain.read_bytes())
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(data[: len(data) // 2])
    reports = []
    records = load_records(bad, on_corrupt=lambda n, why: reports.append(why))
    assert len(records) < 6 and reports and "gzip" in reports[-1]


def test_a_packed_dataset_is_collected_through_a_working_log_and_resumes(tmp_path):
    out = tmp_path / "ds.jsonl.gz"
    task = Task(Matmul(m=16, n=16, k=16), default_target(2))
    tasks = [(TaskInfo(task.key, "mm16", "matmul", "tiny"), task)]
    first = collect_dataset(out, tasks, per_task=4, settings=FAST)
    assert out.exists() and not working_log(out).exists()
    assert manifest_path(out).name == "ds.tasks.json"
    assert features_path(out).name == "ds.features"
    assert (first[0].random, first[0].guided) == (2, 2)
    again = collect_dataset(out, tasks, per_task=5, settings=FAST)
    assert (again[0].before, again[0].random + again[0].guided) == (4, 1)
    ds = load_dataset(out)
    assert ds.names == ["mm16"] and ds.get("mm16").n >= 5
