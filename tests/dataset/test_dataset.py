"""Datasets: a tiny real collection (grouping, manifest, resume, growth), loading without a
manifest, task naming and operator kinds, and the ``dataset`` commands."""
from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from tensortune.cli.dataset import register
from tensortune.dataset import (
    TaskInfo,
    benchmark_workloads,
    default_name,
    load_dataset,
    manifest_path,
    op_kind,
    pool_results,
    read_manifest,
)
from tensortune.dataset import collect_dataset, remeasure_dataset, resolve_tasks
from tensortune.records import pack_records
from tensortune.measure.types import ErrorKind, MeasureInput, MeasureResult
from tensortune.records import RecordWriter
from tensortune.settings import MeasureSettings, SearchSettings, Settings
from tensortune.space import task_space
from tensortune.workload import Conv2d, Matmul, PrimFuncWorkload, Task, default_target

FAST = Settings(measure=MeasureSettings(number=1, repeat=2, min_repeat_ms=1, run_timeout_s=10),
                search=SearchSettings(batch_size=4, sa_chains=8, sa_steps=10))


def _tiny_tasks():
    target = default_target(2)
    out = []
    for name, workload in (("mm32", Matmul(m=32, n=32, k=32)),
                           ("conv", Conv2d(n=1, c=8, h=8, w=8, filters=16, kh=3, kw=3, padding=1))):
        task = Task(workload, target)
        out.append((TaskInfo(task.key, name, op_kind(workload), "tiny"), task))
    return out


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """A dataset of two tiny tasks, collected for 6 configs each and then grown to 8."""
    path = tmp_path_factory.mktemp("collect") / "dataset.jsonl"
    tasks = _tiny_tasks()
    first = collect_dataset(path, tasks, per_task=6, settings=FAST)
    lines_after_first = len(path.read_text().splitlines())
    again = collect_dataset(path, tasks, per_task=6, settings=FAST)
    lines_after_again = len(path.read_text().splitlines())
    grown = collect_dataset(path, tasks, per_task=8, settings=FAST)
    return path, first, (lines_after_first, lines_after_again), again, grown


def test_collection_mixes_random_and_guided_configs(collected):
    path, first, _, _, _ = collected
    assert [c.name for c in first] == ["mm32", "conv"]
    for c in first:
        assert (c.before, c.random, c.guided) == (0, 3, 3)
        assert 0 < c.best_cost < 0.1  # measured and sane; a loaded host may take well over 1 ms
    assert {i.name for i in read_manifest(path).values()} == {"mm32", "conv"}
    assert manifest_path(path).name == "dataset.tasks.json"


def test_rerun_resumes_and_a_larger_budget_grows_the_dataset(collected):
    path, _, (after_first, after_again), again, grown = collected
    assert after_again == after_first  # nothing left to measure
    assert all((c.before, c.random, c.guided) == (6, 0, 0) for c in again)
    assert all((c.before, c.random, c.guided) == (6, 0, 2) for c in grown)
    ds = load_dataset(path)
    for data in ds:
        measured = [r for r in data.results if r.error is not ErrorKind.INVALID_CONFIG]
        assert len(measured) == 8
        assert len({i.config for i in data.inputs}) == data.n  # distinct configs


def test_loaded_dataset_groups_records_by_task_with_metadata(collected):
    path = collected[0]
    ds = load_dataset(path)
    assert ds.names == ["mm32", "conv"]
    mm, conv = ds.get("mm32"), ds.get("conv")
    assert (mm.info.op, conv.info.op, mm.info.source) == ("matmul", "conv2d", "tiny")
    assert all(i.task == mm.task for i in mm.inputs)
    assert mm.n_ok >= 6 and mm.best_gflops > 0 and mm.flops == 2 * 32 ** 3
    assert ds.select(["tiny"]).names == ["mm32", "conv"]  # a source selects its tasks
    assert ds.n_records == mm.n + conv.n
    with pytest.raises(KeyError, match="mm32"):
        ds.get("nope")


def test_dataset_info_command(collected):
    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["dataset", "info", str(collected[0]), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout.strip().splitlines()[-1])
    assert [(t["task"], t["records"] >= 8, t["gflops"] > 0) for t in doc["tasks"]] == [
        ("mm32", True, True), ("conv", True, True)]
    assert [(t["sessions"], t["session_top10"]) for t in doc["tasks"]] == [(1, None), (1, None)]


def test_features_command_stores_every_row_packed_and_a_rerun_computes_none(collected, tmp_path):
    import gzip
    import shutil

    from tensortune.dataset import features_path

    path = tmp_path / "dataset.jsonl"
    shutil.copy(collected[0], path)
    shutil.copy(manifest_path(collected[0]), manifest_path(path))
    app = typer.Typer()
    register(app)
    run = CliRunner().invoke(app, ["dataset", "features", str(path), "--jobs", "1"])
    assert run.exit_code == 0, run.output
    store = features_path(path)
    rows = sum(t.n for t in load_dataset(path))
    assert f"computed {rows} rows" in run.output and f"packed {rows} rows" in run.output
    assert not (store / "hardware-v2.jsonl").exists()
    with gzip.open(store / "hardware-v2.jsonl.gz", "rt") as f:
        assert len(f.read().splitlines()) == rows
    again = CliRunner().invoke(app, ["dataset", "features", str(path), "--jobs", "1"])
    assert again.exit_code == 0 and "computed 0 rows" in again.output
    assert "packed" not in again.output


def test_collect_names_a_skip_dataset_without_manifest(tmp_path):
    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["dataset", "collect", "--tasks", "matmul_512", "--out",
                                      str(tmp_path / "d.jsonl"), "--skip", str(tmp_path / "x.jsonl")])
    assert result.exit_code != 0
    said = " ".join(result.output.split())  # the console wraps long lines
    assert "--skip" in said and "x.jsonl: no dataset manifest" in said
    assert not (tmp_path / "d.jsonl").exists()


def test_records_without_manifest_get_default_names_and_repeats_are_pooled(tmp_path):
    task = Task(Matmul(m=16, n=8, k=4), {"kind": "llvm"})
    cfgs = task_space(task).sample_many(3, __import__("numpy").random.default_rng(0))
    path = tmp_path / "plain.jsonl"
    with RecordWriter(path) as w:
        w.append(MeasureInput(task, cfgs[0]), MeasureResult((2e-6,)))
        w.append(MeasureInput(task, cfgs[1]), MeasureResult((), ErrorKind.COMPILE_ERROR, "x"))
        w.append(MeasureInput(task, cfgs[0]), MeasureResult((9e-6,)))  # a second session
    with path.open("a") as f:
        f.write('{"v": 1, "torn\n')
    corrupt = []
    ds = load_dataset(path, on_corrupt=lambda n, why: corrupt.append(n))
    assert corrupt == [4]
    (data,) = ds.tasks
    assert (data.name, data.info.op, data.info.source) == ("matmul_16x8x4", "matmul", "records")
    assert data.n == 2 and data.n_ok == 1
    assert data.results[0].costs == (2e-6, 9e-6) and data.best_cost == pytest.approx(5.5e-6)


def test_pooling_keeps_successful_sessions_and_wrong_results():
    a = MeasureResult((1.0, 3.0), message="timed beside 1 busy cores", run_s=1.0, verified=True)
    b = MeasureResult((2.0,), run_s=2.0, timestamp=5.0)
    timeout = MeasureResult((), ErrorKind.TIMEOUT, "hung")
    wrong = MeasureResult((), ErrorKind.WRONG_RESULT, "max error 1")
    pooled = pool_results([a, timeout, b])
    assert pooled.costs == (1.0, 3.0, 2.0) and pooled.cost == 2.0 and pooled.ok
    assert (pooled.run_s, pooled.verified, pooled.timestamp) == (3.0, True, 5.0)
    assert pooled.message == "timed beside 1 busy cores"
    assert pool_results([a, wrong]).error is ErrorKind.WRONG_RESULT
    assert pool_results([timeout, MeasureResult((), ErrorKind.RUNTIME_ERROR)]) == timeout
    assert pool_results([b]) is b


def test_remeasure_times_every_successful_config_once_more_and_resumes(collected, tmp_path):
    packed = tmp_path / "again.jsonl.gz"
    pack_records(collected[0], packed)
    manifest_path(packed).write_text(manifest_path(collected[0]).read_text())
    before = load_dataset(packed)
    seen = []
    summary = remeasure_dataset(packed, 2, FAST, ["mm32"], batch=3,
                                callbacks=[lambda i, r: seen.append(i.config)])
    (mm,) = summary
    old = before.get("mm32")
    assert (mm.name, mm.configs, mm.timed) == ("mm32", old.n_ok, old.n_ok) and mm.failed == 0
    assert sorted(map(str, seen)) == sorted(str(i.config) for i, r in zip(old.inputs, old.results)
                                            if r.ok)
    assert mm.spearman is not None and -1.0 <= mm.spearman <= 1.0
    assert mm.top10 is None  # fewer than 20 configs: no top-10 to judge
    assert packed.exists() and not (tmp_path / "again.jsonl").exists()  # packed again
    after = load_dataset(packed)
    for r_old, r_new in zip(old.results, after.get("mm32").results):
        assert len(r_new.costs) == (2 * len(r_old.costs) if r_old.ok else 0)
    assert after.get("conv").results == before.get("conv").results  # not selected
    assert remeasure_dataset(packed, 2, FAST, ["mm32"])[0].timed == 0  # resumed: nothing left
    with pytest.raises(KeyError, match="nope"):
        remeasure_dataset(packed, 2, FAST, ["nope"])
    assert not (tmp_path / "again.jsonl").exists()  # a bad name changes nothing
    with pytest.raises(ValueError, match="sessions"):
        remeasure_dataset(packed, 0, FAST)
    with pytest.raises(FileNotFoundError, match="no such dataset"):
        remeasure_dataset(tmp_path / "missing.jsonl", 2, FAST)


def test_benchmark_tasks_and_op_kinds():
    resolved = resolve_tasks(["benchmark"], {"kind": "llvm"})
    names = [info.name for info, _ in resolved]
    assert names == ["conv2d_C7", "conv2d_C12", "matmul_512", "dense_128x768x3072"]
    assert [info.op for info, _ in resolved] == ["conv2d", "conv2d", "matmul", "dense"]
    assert resolve_tasks(["matmul_512", "benchmark"], {"kind": "llvm"})[0][0].name == "matmul_512"
    assert len(resolve_tasks(["matmul_512", "benchmark"], {"kind": "llvm"})) == 4  # no repeats
    assert default_name(benchmark_workloads()["conv2d_C12"]) == "conv2d_C12"
    with pytest.raises(KeyError, match="zoo model"):
        resolve_tasks(["alexnet"], {"kind": "llvm"})
    held = {resolved[0][0].key}  # a task another dataset holds is not collected again
    assert [i.name for i, _ in resolve_tasks(["benchmark"], {"kind": "llvm"}, skip=held)] == [
        "conv2d_C12", "matmul_512", "dense_128x768x3072"]

    conv = Conv2d(n=1, c=8, h=8, w=8, filters=8, kh=3, kw=3, padding=1, groups=8)
    assert op_kind(conv) == "depthwise_conv2d"
    fused = PrimFuncWorkload.from_prim_func(conv.prim_func(), name="fused_conv2d3_add_relu")
    assert op_kind(fused) == "depthwise_conv2d"
    dense = PrimFuncWorkload.from_prim_func(Matmul(m=4, n=8, k=16).prim_func(),
                                            name="fused_matmul_add")
    assert op_kind(dense) == "dense"
    assert op_kind(PrimFuncWorkload.from_prim_func(Matmul(m=4, n=8, k=16).prim_func(),
                                                   name="max_pool2d")) == "other"


def test_adopting_records_copies_those_of_the_collected_tasks(collected, tmp_path):
    from tensortune.records import load_records

    source = collected[0]
    tasks = _tiny_tasks()[:1]  # mm32 only
    out = tmp_path / "adopted.jsonl"
    summary = collect_dataset(out, tasks, per_task=0, settings=FAST,
                              adopt=load_records(source))
    ds = load_dataset(out)
    assert ds.names == ["mm32"] and summary[0].before == ds.get("mm32").n
    assert ds.get("mm32").n == load_dataset(source).get("mm32").n
    collect_dataset(out, tasks, per_task=0, settings=FAST, adopt=load_records(source))
    assert load_dataset(out).get("mm32").n == ds.get("mm32").n  # adopted once


def test_session_agreement_is_spearman_and_the_top10_a_perfect_model_would_get():
    from tensortune.dataset.remeasure import _agreement

    before = [MeasureResult((float(i + 1),)) for i in range(25)]
    same = {i: MeasureResult((float(i + 1),)) for i in range(25)}
    assert _agreement(before, same) == (1.0, 1.0)
    # the new session swaps the 10th and 11th fastest: the picked 10 cost 1+..+9+11
    swapped = {**same, 9: MeasureResult((10.6,)), 10: MeasureResult((10.4,))}
    spearman, top10 = _agreement(before, swapped)
    assert spearman < 1.0 and top10 == pytest.approx(55 / 56)
    assert _agreement(before[:2], {0: same[0], 1: same[1]}) == (None, None)


def test_remeasure_command_reports_json_and_names_bad_input(collected, tmp_path):
    app = typer.Typer()
    register(app)
    path = tmp_path / "cli.jsonl"
    path.write_text(collected[0].read_text())
    manifest_path(path).write_text(manifest_path(collected[0]).read_text())
    run = CliRunner().invoke(app, ["dataset", "remeasure", str(path), "--tasks", "conv",
                                   "--json"], env={"TENSORTUNE_REPEAT": "1", "TENSORTUNE_NUMBER": "1",
                                        "TENSORTUNE_MIN_REPEAT_MS": "1"})
    assert run.exit_code == 0, run.output
    doc = json.loads(run.stdout.strip().splitlines()[-1])
    assert doc["sessions"] == 2 and [t["name"] for t in doc["tasks"]] == ["conv"]
    assert doc["tasks"][0]["timed"] == load_dataset(collected[0]).get("conv").n_ok
    bad = CliRunner().invoke(app, ["dataset", "remeasure", str(path), "--tasks", "nope"])
    assert bad.exit_code != 0 and "nope" in bad.output
    bad = CliRunner().invoke(app, ["dataset", "remeasure", str(path), "--sessions", "0"])
    assert bad.exit_code != 0 and "sessions" in bad.output


def test_session_noise_scores_each_session_against_the_pooled_others(tmp_path):
    from tensortune.dataset import session_noise

    task = Task(Matmul(m=64, n=64, k=64), {"kind": "llvm"})
    cfgs = list(dict.fromkeys(task_space(task).sample_many(40, __import__("numpy").random
                                                           .default_rng(0))))[:25]
    assert len(cfgs) == 25
    path = tmp_path / "sessions.jsonl"
    with RecordWriter(path) as w:
        for session in range(3):
            for i, cfg in enumerate(cfgs):
                # session 2 swaps the 10th and 11th fastest configs
                cost = {9: 10.6, 10: 10.4}.get(i, i + 1.0) if session == 2 else i + 1.0
                w.append(MeasureInput(task, cfg), MeasureResult((cost * 1e-6,)))
    (noise,) = session_noise(load_dataset(path))
    assert (noise.sessions, noise.configs) == (3, 25)
    # sessions 0 and 1 pick the pooled others' best 10; session 2 picks the 11th for the 10th
    assert noise.top10 == pytest.approx((1 + 1 + 55 / 56) / 3)
    assert 0.99 < noise.spearman < 1.0
    single = tmp_path / "single.jsonl"
    single.write_text("".join(path.read_text().splitlines(keepends=True)[:25]))
    (one,) = session_noise(load_dataset(single))
    assert (one.sessions, one.configs, one.spearman, one.top10) == (1, 25, None, None)
