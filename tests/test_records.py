"""Records: round trip, corrupt lines, resume helpers, append-only writes, rebuilding the best."""
import json
import logging

import numpy as np
import pytest

from tensortune.measure.types import ErrorKind, MeasureInput, MeasureResult
from tensortune.records import (Record, RecordWriter, best_from_log, best_record, build_best,
                                load_records, measured_configs, records_for)
from tensortune.space import InvalidConfigError, apply_config, task_space
from tensortune.workload import Matmul, Task

TARGET = {"kind": "llvm", "num-cores": 1}
TASK = Task(Matmul(m=16, n=16, k=16), TARGET)
OTHER_SHAPE = Task(Matmul(m=16, n=16, k=32), TARGET)
OTHER_TARGET = Task(Matmul(m=16, n=16, k=16), {"kind": "llvm", "num-cores": 2})


@pytest.fixture(scope="module")
def configs():
    """Four distinct configs of TASK that its template can apply."""
    space = task_space(TASK)
    out = []
    for index in range(0, len(space), max(len(space) // 97, 1)):
        cfg = space.get(index)
        try:
            apply_config(TASK, cfg, space)
        except InvalidConfigError:
            continue
        out.append(cfg)
        if len(out) == 4:
            return out
    pytest.fail("found fewer than 4 applicable configs")


def ok(*costs, ts=1700000000.0):
    return MeasureResult(costs=tuple(costs), build_s=0.25, run_s=0.5, verified=True, timestamp=ts)


def failed(kind=ErrorKind.COMPILE_ERROR):
    return MeasureResult(costs=(), error=kind, message="LLVM said no", build_s=0.1,
                         timestamp=1700000001.0)


def test_round_trip(tmp_path, configs):
    path = tmp_path / "sub" / "dir" / "log.jsonl"  # parents are created
    written = [(MeasureInput(TASK, configs[0]), ok(1e-3, 2e-3, 1.5e-3)),
               (MeasureInput(TASK, configs[1]), failed()),
               (MeasureInput(OTHER_SHAPE, configs[2]), ok(4e-3))]
    with RecordWriter(path) as writer:
        for inp, res in written:
            writer.append(inp, res)
    records = load_records(path)
    assert [(r.to_input(), r.to_result()) for r in records] == written
    assert records[0].to_input().task.key == TASK.key
    assert records[1].error is ErrorKind.COMPILE_ERROR and records[1].cost == float("inf")
    line = json.loads(path.read_text().splitlines()[0])
    assert line["v"] == 1 and line["workload_key"] == TASK.workload.key
    assert line["workload"] == {"op": "matmul", "dtype": "float32", "m": 16, "n": 16, "k": 16}
    assert line["error"] == "none" and line["costs"] == [1e-3, 2e-3, 1.5e-3]
    assert Record.from_json(line) == records[0]


def test_unstamped_result_gets_the_write_time(tmp_path, configs):
    with RecordWriter(tmp_path / "log.jsonl") as writer:
        rec = writer.append(MeasureInput(TASK, configs[0]), MeasureResult(costs=(1e-3,)))
    assert rec.ts > 1.7e9
    assert load_records(tmp_path / "log.jsonl")[0].ts == rec.ts


def test_corrupt_lines_are_reported_with_line_numbers_and_skipped(tmp_path, configs, caplog):
    path = tmp_path / "log.jsonl"
    with RecordWriter(path) as writer:
        for cfg in configs[:3]:
            writer.append(MeasureInput(TASK, cfg), ok(1e-3))
    good = path.read_text().splitlines()
    obj = json.loads(good[0])
    bad = {
        "torn": good[1][: len(good[1]) // 2],
        "version": json.dumps({**obj, "v": 2}),
        "missing": json.dumps({k: v for k, v in obj.items() if k not in ("costs", "config")}),
        "operator": json.dumps({**obj, "workload": {**obj["workload"], "op": "softmax"}}),
        "error kind": json.dumps({**obj, "error": "exploded"}),
        "not object": "[1, 2, 3]",
    }
    lines = [good[0], bad["torn"], good[1], bad["version"], bad["missing"], "",
             bad["operator"], good[2], bad["error kind"], bad["not object"]]
    path.write_text("\n".join(lines) + "\n")
    reports = []
    with caplog.at_level(logging.WARNING, logger="tensortune.records"):
        records = load_records(path, on_corrupt=lambda n, why: reports.append((n, why)))
    assert [r.config for r in records] == configs[:3]
    assert [n for n, _ in reports] == [2, 4, 5, 7, 9, 10]
    why = dict(reports)
    assert "JSON" in why[2]
    assert "schema version 2" in why[4]
    assert "costs" in why[5] and "config" in why[5]
    assert "softmax" in why[7]
    assert "exploded" in why[9]
    assert "object" in why[10]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 6 and f"{path}:4:" in warned[1]


def test_resume_helpers_filter_by_task(tmp_path, configs):
    path = tmp_path / "log.jsonl"
    with RecordWriter(path) as writer:
        writer.append(MeasureInput(TASK, configs[0]), ok(3e-3))
        writer.append(MeasureInput(TASK, configs[1]), ok(1e-3, 3e-3))  # mean 2e-3: best of TASK
        writer.append(MeasureInput(TASK, configs[2]), failed(ErrorKind.TIMEOUT))
        writer.append(MeasureInput(OTHER_TARGET, configs[3]), ok(1e-6))  # faster, other target
        writer.append(MeasureInput(OTHER_SHAPE, configs[3]), ok(1e-7))
    records = load_records(path)
    assert len(records_for(records, TASK)) == 3
    # failed measurements count as measured: a resumed run must not retry them
    assert measured_configs(records, TASK) == set(configs[:3])
    assert measured_configs(records, OTHER_TARGET) == {configs[3]}
    best = best_record(records, TASK)
    assert best.config == configs[1] and best.cost == pytest.approx(2e-3)
    assert best_from_log(path, OTHER_SHAPE).costs == (1e-7,)
    assert best_record(records, Task(Matmul(m=8, n=8, k=8), TARGET)) is None


def test_best_record_ignores_errors(tmp_path, configs):
    path = tmp_path / "log.jsonl"
    with RecordWriter(path) as writer:
        writer.append(MeasureInput(TASK, configs[0]), failed(ErrorKind.WRONG_RESULT))
    assert best_from_log(path, TASK) is None
    assert measured_configs(load_records(path), TASK) == {configs[0]}


def test_second_writer_appends(tmp_path, configs):
    path = tmp_path / "log.jsonl"
    with RecordWriter(path) as writer:
        writer.append(MeasureInput(TASK, configs[0]), ok(1e-3))
    first = path.read_text()
    with RecordWriter(path) as writer:
        writer.append(MeasureInput(TASK, configs[1]), ok(2e-3))
    assert path.read_text().startswith(first)
    assert [r.config for r in load_records(path)] == configs[:2]
    writer.close()  # closing twice is harmless
    with pytest.raises(ValueError, match="closed"):
        writer.append(MeasureInput(TASK, configs[2]), ok(1e-3))


def test_build_best_runs_the_best_config(tmp_path, configs):
    import tvm

    path = tmp_path / "log.jsonl"
    with RecordWriter(path) as writer:
        writer.append(MeasureInput(TASK, configs[0]), ok(5e-3))
        writer.append(MeasureInput(TASK, configs[2]), ok(1e-3))
        writer.append(MeasureInput(TASK, configs[3]), failed())
    module, config, record = build_best(path, TASK)
    assert config == configs[2] and record.costs == (1e-3,)
    a, b = TASK.workload.random_inputs(seed=3)
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros((16, 16), "float32"), dev)
    module["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), out)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-5)
    with pytest.raises(LookupError, match="no error-free record"):
        build_best(path, OTHER_SHAPE)


def test_a_record_of_the_same_function_with_other_buffer_names_applies_to_the_task():
    """Two models' copies of one fused function: one task key, but the template names its
    pack knobs after the buffers (``pack_lv15`` there, ``pack_lv19`` here). The other copy's
    best record comes back in this task's names, applies, and is what the build picks."""
    from tvm import te

    from tensortune.workload import PrimFuncWorkload, default_target

    def matmul(a_name, b_name):
        a = te.placeholder((32, 24), name=a_name)
        b = te.placeholder((24, 16), name=b_name)
        k = te.reduce_axis((0, 24), name="k")
        c = te.compute((32, 16), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
        return PrimFuncWorkload.from_prim_func(te.create_prim_func([a, b, c]), "matmul")

    there = Task(matmul("lv15", "param_0"), default_target(1))
    here = Task(matmul("lv19", "param_0"), default_target(1))
    assert there.key == here.key and there.workload.param_names != here.workload.param_names
    space_there, space_here = task_space(there), task_space(here)
    config = space_there.sample(np.random.default_rng(0))
    assert "pack_lv15" in config and config not in space_here
    rec = Record.from_measure(MeasureInput(there, config), MeasureResult((1e-4,)))
    [mine] = records_for([rec], here)
    assert mine.config in space_here and mine.config["pack_lv19"] == config["pack_lv15"]
    assert best_record([rec], here).config == mine.config
    apply_config(here, mine.config, space_here)  # it schedules the function here


def test_a_model_build_takes_the_best_record_that_still_fits_the_space(tmp_path, configs):
    """A template that changed its space (a ragged axis padded, say) leaves faster records of
    configs it no longer has: the build takes the best one that applies, not none."""
    from tensortune.space import Config
    from tensortune.tasks.compile import best_records_of

    stale = Config({**dict(configs[0]), "tile_i": (16, 1, 1, 3)})  # 48 rows: not this space's
    path = tmp_path / "log.jsonl"
    with RecordWriter(path) as writer:
        writer.append(MeasureInput(TASK, stale), ok(1e-6))
        writer.append(MeasureInput(TASK, configs[1]), ok(3e-3))
        writer.append(MeasureInput(TASK, configs[2]), ok(2e-3))
    assert best_record(load_records(path), TASK).config == stale
    assert best_records_of(path, [TASK])[TASK.key].config == configs[2]


def test_confirming_timings_decide_the_best_by_their_median(tmp_path, configs):
    """A config whose one first timing was lucky loses to one that stays fast when both are
    timed again (``tasks.confirm``); the record handed back is its median timing, and a
    log without confirming records still gives the plain lowest cost."""
    path = tmp_path / "log.jsonl"
    lucky, steady = MeasureInput(TASK, configs[0]), MeasureInput(TASK, configs[1])
    with RecordWriter(path) as writer:
        writer.append(lucky, ok(1.0e-3))
        writer.append(steady, ok(1.1e-3))
    assert best_from_log(path, TASK).config == configs[0]
    with RecordWriter(path) as writer:
        for a, b in ((1.3e-3, 1.15e-3), (1.25e-3, 1.1e-3), (1.2e-3, 1.2e-3)):
            writer.append(lucky, ok(a), confirm=True)
            writer.append(steady, ok(b), confirm=True)
    records = load_records(path)
    assert [r.confirm for r in records] == [False, False] + [True] * 6
    best = best_record(records, TASK)
    assert best.config == configs[1] and best.confirm and best.cost == pytest.approx(1.15e-3)
    # the key is written only when set: a log of first timings reads as it always did
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert "confirm" not in lines[0] and lines[2]["confirm"] is True
    lines[2]["confirm"] = "yes"
    with pytest.raises(ValueError, match="confirm"):
        Record.from_json(lines[2])
