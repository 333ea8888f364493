"""Failures kept whole: errors.log holds what a record cuts to one line, and TENSORTUNE_STRICT
raises what would otherwise be swallowed (builder, runner, template application, rewrites)."""
from __future__ import annotations

import pytest

from tensortune.errors import STRICT_ENV, StrictError, full_text, set_strict, strict
from tensortune.measure import ErrorKind, LocalBuilder, MeasureInput, MeasureResult
from tensortune.measure.pool import ERROR, JobFailure
from tensortune.records import RecordWriter, errors_path, load_records
from tensortune.settings import MeasureSettings, Settings
from tensortune.space import Config, InvalidConfigError, apply_config, task_space
from tensortune.tuner import tune_task
from tensortune.workload import Matmul, Task, default_target

BROKEN = Task(Matmul(m=16, n=16, k=16), default_target(2), "tests.faulty_templates:broken")
FAST = Settings(measure=MeasureSettings(number=1, repeat=1, min_repeat_ms=1, run_timeout_s=4))


@pytest.fixture(autouse=True)
def not_strict(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)
    yield
    set_strict(None)


def test_a_failing_candidates_full_traceback_goes_to_errors_log(tmp_path):
    log = tmp_path / "broken.jsonl"
    tune_task(BROKEN, 3, tuner="grid", log=log, settings=FAST)
    records = load_records(log)
    assert len(records) == 3 and all(r.error is ErrorKind.INVALID_CONFIG for r in records)
    # the record keeps the first line ...
    assert all("the template's own bug" in r.message and "second line" not in r.message
               for r in records)
    # ... errors.log, beside it, the whole traceback, once per failed candidate
    errors = errors_path(log)
    assert errors == tmp_path / "broken.errors.log"
    text = errors.read_text()
    assert text.count("==== ") == 3 and text.count("invalid_config: matmul") == 3
    assert "Traceback (most recent call last)" in text and "_broken_helper" in text
    assert "second line of the message\nthird line" in text
    assert '"variant":0' in text and BROKEN.key in text


def test_errors_log_is_per_run_and_skips_copies_and_successes(tmp_path):
    inp = MeasureInput(BROKEN, Config(variant=0))
    failed = MeasureResult((), ErrorKind.COMPILE_ERROR, "boom", detail="Traceback ...\nboom")
    assert errors_path(tmp_path / "run" / "log.jsonl") == tmp_path / "run" / "errors.log"
    with RecordWriter(tmp_path / "run" / "log.jsonl") as run, \
            RecordWriter(tmp_path / "records.jsonl", copy=True) as shared:
        for writer in (run, shared):
            writer.append(inp, failed)
            writer.append(inp, MeasureResult((0.001,)))
    assert (tmp_path / "run" / "errors.log").read_text().count("Traceback ...\nboom") == 1
    assert not errors_path(tmp_path / "records.jsonl").exists()
    assert [r.message for r in load_records(tmp_path / "records.jsonl")] == ["boom", ""]


def test_the_strict_switch(monkeypatch):
    for value, on in (("", False), ("0", False), ("off", False), ("1", True), ("yes", True)):
        monkeypatch.setenv(STRICT_ENV, value)
        assert strict() is on
    set_strict(False)  # what a worker is told by its parent wins over its environment
    assert not strict()
    try:
        raise ValueError("inner")
    except ValueError as err:
        assert "Traceback" in full_text(err) and "ValueError: inner" in full_text(err)


def test_strict_template_application_raises_the_templates_own_error(monkeypatch):
    space = task_space(BROKEN)
    config = space.get(0)
    with pytest.raises(InvalidConfigError, match="the template's own bug"):
        apply_config(BROKEN, config, space)
    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(RuntimeError, match="the template's own bug") as err:
        apply_config(BROKEN, config, space)
    assert not isinstance(err.value, InvalidConfigError)


def test_strict_builder_raises_the_workers_traceback(monkeypatch):
    inp = MeasureInput(BROKEN, Config(variant=0))
    with LocalBuilder(workers=1, timeout_s=120) as builder:
        (build,) = builder.build([inp])
        assert build.error is ErrorKind.INVALID_CONFIG and "_broken_helper" in build.detail
        monkeypatch.setenv(STRICT_ENV, "1")  # read by the caller, passed on to the worker
        with pytest.raises(StrictError, match="build failed") as err:
            builder.build([inp])
    assert "_broken_helper" in str(err.value) and "third line" in str(err.value)


def test_strict_runner_raises_a_candidates_error(monkeypatch):
    from tensortune.measure.runner import _to_result

    failure = JobFailure(ERROR, "TVMError: cannot load", detail="Traceback ...\nTVMError: all")
    result = _to_result(failure, 0.1, 0.2, 5.0)
    assert result.error is ErrorKind.RUNTIME_ERROR and result.detail.endswith("TVMError: all")
    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(StrictError, match="run failed: TVMError: cannot load"):
        _to_result(failure, 0.1, 0.2, 5.0)


def test_strict_graph_rewrite_raises(monkeypatch):
    from tensortune.tasks.graph import guarded
    from tensortune.tasks.layout import GraphRewriteWarning

    def rewrite(mod):
        raise IndexError("a gap in TVM's rules")

    with pytest.warns(GraphRewriteWarning, match="a gap in TVM's rules"):
        assert guarded("demo", rewrite, "module") == "module"
    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(IndexError, match="a gap in TVM's rules"):
        guarded("demo", rewrite, "module")
