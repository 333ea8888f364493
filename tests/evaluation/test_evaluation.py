"""The cost-model evaluation harness on a synthetic dataset whose costs follow a known law.

No kernel is built or timed: records are written directly, with costs from ``law`` (a smooth
function of the vector tile, the register tile and the unroll step, the same for every task).
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from tensortune.cli.costmodel import register
from tensortune.evaluation import (
    METRICS,
    FeatureBank,
    compare,
    default_feature_sets,
    evaluate,
    model_folds,
    score_task,
    space_specific,
    task_folds,
)
from tensortune.dataset import TaskInfo, load_dataset, op_kind, write_manifest
from tensortune.measure.types import ErrorKind, MeasureInput, MeasureResult
from tensortune.records import RecordWriter
from tensortune.space import task_space
from tensortune.workload import Conv2d, Dense, Matmul, Task

TARGET = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}
WORKLOADS = {"mm_a": Matmul(m=32, n=32, k=32), "mm_b": Matmul(m=64, n=32, k=16),
             "dense": Dense(batch=16, in_features=32, out_features=64),
             "conv": Conv2d(n=1, c=8, h=8, w=8, filters=16, kh=3, kw=3, padding=1)}
PER_TASK = 40


def law(config, flops: int) -> float:
    """Seconds: fastest with an 8-wide vector tile, a 16-element register tile and unroll 16."""
    spatial = [v for k, v in config.items() if k.startswith("tile_") and len(v) == 4]
    inner = config["tile_" + config["vector_axis"]][-1]
    elems = math.prod(t[-1] for t in spatial)
    penalty = (0.6 * abs(math.log2(inner) - 3) + 0.3 * abs(math.log2(elems) - 4)
               + {0: 0.8, 16: 0.0, 64: 0.2, 512: 0.6}[config["unroll"]])
    return flops / 1e9 / (40 * 2 ** -penalty)


def write_synthetic(path, per_task: int = PER_TASK, seed: int = 0, target=TARGET,
                    names=tuple(WORKLOADS), source: str = "synthetic") -> None:
    """Records of the four tasks (or ``names``); every 10th record of ``mm_a`` is a runtime
    error."""
    rng = np.random.default_rng(seed)
    infos = []
    with RecordWriter(path) as writer:
        for name in names:
            workload = WORKLOADS[name]
            task = Task(workload, target)
            infos.append(TaskInfo(task.key, name, op_kind(workload), source))
            for i, cfg in enumerate(task_space(task).sample_many(per_task, rng)):
                if name == "mm_a" and i % 10 == 9:
                    res = MeasureResult((), ErrorKind.RUNTIME_ERROR, "boom")
                else:
                    cost = law(cfg, workload.flops) * (1 + 0.02 * rng.standard_normal())
                    res = MeasureResult((cost, cost))
                writer.append(MeasureInput(task, cfg), res)
    write_manifest(path, infos)


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("synthetic") / "dataset.jsonl"
    write_synthetic(path)
    return path


@pytest.fixture(scope="module")
def dataset(dataset_path):
    return load_dataset(dataset_path)


@pytest.fixture(scope="module")
def bank():
    return FeatureBank()


class Oracle:
    """A perfect model: its score is the measured throughput."""

    def __init__(self, extractor, truth):
        self.truth = truth

    def pretrain(self, inputs, results):
        pass

    def fit(self, inputs, results):
        pass

    def predict(self, inputs):
        return np.array([self.truth.get((i.task.key, i.config), 0.0) for i in inputs])


def oracle_factory(dataset):
    truth = {(i.task.key, i.config): 1.0 / r.cost for d in dataset
             for i, r in zip(d.inputs, d.results) if r.ok}
    return lambda extractor: Oracle(extractor, truth)


def _in_range(report):
    for s in report.scores:
        assert -1.0 <= s.pearson <= 1.0 and -1.0 <= s.spearman <= 1.0
        assert 0.0 <= s.pairwise <= 1.0
        for _, v in s.topk:
            assert v is None or 0.0 < v <= 1.0


# -- splits ----------------------------------------------------------------------------------------

def test_held_out_tasks_never_appear_in_training(dataset):
    (fold,) = task_folds(dataset, holdout=["mm_a", "conv"])
    names = dataset.names
    assert sorted(names[i] for i in fold.test) == ["conv", "mm_a"]
    assert sorted(names[i] for i in fold.train) == ["dense", "mm_b"]
    folds = task_folds(dataset, folds=3, seed=1)
    assert len(folds) == 3
    tested = [i for f in folds for i in f.test]
    assert sorted(tested) == list(range(len(dataset)))  # every task held out exactly once
    for f in folds:
        assert not set(f.train) & set(f.test) and f.train
    with pytest.raises(KeyError, match="neither a task nor a source"):
        task_folds(dataset, holdout=["resnet18.nope"])
    with pytest.raises(ValueError, match="nothing to train on"):
        task_folds(dataset, holdout=["synthetic"])  # a source: all four tasks


def test_twins_of_a_held_out_task_stay_out_of_training(tmp_path):
    """The same convolution under two targets is one shape: never on both sides of a split."""
    from tensortune.dataset import shape_key

    base = load_dataset(_twin_dataset(tmp_path))
    names = base.names
    assert shape_key(base.get("conv").task.workload) == shape_key(base.get("conv2").task.workload)
    (fold,) = task_folds(base, holdout=["conv"])
    assert "conv2" not in [names[i] for i in fold.train]
    for seed in range(4):
        for f in task_folds(base, folds=2, seed=seed):
            test = {names[i] for i in f.test}
            assert ("conv" in test) == ("conv2" in test)


def test_by_model_folds_hold_out_each_model_whole_and_its_twins_elsewhere(dataset, tmp_path):
    import dataclasses

    from tensortune.dataset import Dataset

    def relabel(ds, nets):
        return Dataset(tuple(dataclasses.replace(t, info=dataclasses.replace(
            t.info, source=nets[t.name])) for t in ds), ds.path)

    # conv2 is conv's twin under another target
    ds = relabel(load_dataset(_twin_dataset(tmp_path)),
                 {"conv": "net_a", "conv2": "net_b", "mm_a": "net_b", "dense": "net_c"})
    names = ds.names
    folds = model_folds(ds)
    tested = [sorted(names[i] for i in f.test) for f in folds]
    trained = [sorted(names[i] for i in f.train) for f in folds]
    assert tested == [["conv"], ["conv2", "mm_a"], ["dense"]]  # one fold per model, whole
    assert trained == [["dense", "mm_a"], ["dense"], ["conv", "conv2", "mm_a"]]  # twins left out
    with pytest.raises(ValueError, match="at least 2 models, the dataset has only synthetic"):
        model_folds(dataset)
    nets = relabel(dataset, {"mm_a": "net_a", "mm_b": "net_a", "conv": "net_b", "dense": "net_c"})
    report = evaluate(nets, "xgb-reg", "itervar", split="by-model", bank=FeatureBank())
    assert report.split == "by-model"
    assert sorted(s.task for s in report.scores) == sorted(nets.names)
    _in_range(report)
    per = report.by_source()  # each network's tasks, averaged apart
    assert [(src, per[src]["tasks"]) for src in per] == [("net_a", 2), ("net_b", 1), ("net_c", 1)]
    net_a = [s.pearson for s in report.scores if s.task in ("mm_a", "mm_b")]
    assert per["net_a"]["pearson"] == pytest.approx(np.mean(net_a))
    assert report.to_json()["by_source"]["net_c"]["tasks"] == 1
    with pytest.raises(ValueError, match="by-model holds out every model once"):
        evaluate(nets, "xgb-reg", "itervar", split="by-model", holdout=["conv"])


def _twin_dataset(tmp_path):
    path = tmp_path / "twins.jsonl"
    rng = np.random.default_rng(0)
    infos = []
    with RecordWriter(path) as writer:
        for name, workload, target in (
                ("conv", WORKLOADS["conv"], TARGET),
                ("conv2", WORKLOADS["conv"], {**TARGET, "mcpu": "skylake-avx512"}),
                ("mm_a", WORKLOADS["mm_a"], TARGET), ("dense", WORKLOADS["dense"], TARGET)):
            task = Task(workload, target)
            infos.append(TaskInfo(task.key, name, op_kind(workload), "synthetic"))
            for cfg in task_space(task).sample_many(4, rng):
                writer.append(MeasureInput(task, cfg), MeasureResult((1e-5,)))
    write_manifest(path, infos)
    return path


def test_a_history_dataset_pretrains_and_every_task_of_the_other_is_scored(dataset, tmp_path):
    """Another machine's records (same law, other target) as the history of two tasks."""
    path = tmp_path / "other.jsonl"
    write_synthetic(path, seed=3, target={**TARGET, "mcpu": "znver3"}, names=("mm_a", "conv"))
    other = load_dataset(path)
    report = evaluate(other, "xgb-reg", "itervar", history=dataset, bank=FeatureBank())
    _in_range(report)
    assert sorted(s.task for s in report.scores) == ["conv", "mm_a"]
    # the history's mm_a and conv are the scored tasks' twins: pretrained on mm_b and dense
    assert all(s.n_train == 2 * PER_TASK for s in report.scores)
    assert report.mean()["spearman"] > 0.5  # the law carries over from the other machine
    twins = evaluate(other, "xgb-reg", "itervar", history=dataset, history_twins=True,
                     holdout=["conv"], bank=FeatureBank())
    (s,) = twins.scores
    assert s.task == "conv" and s.n_train == 4 * PER_TASK
    tuned = evaluate(other, "xgb-reg", "itervar", history=dataset, finetune=8, bank=FeatureBank())
    assert [(s.n_train, s.n_test + s.n_failed) for s in tuned.scores] == \
        [(2 * PER_TASK + 8, PER_TASK - 8)] * 2
    with pytest.raises(ValueError, match="by-task split only"):
        evaluate(other, "xgb-reg", "itervar", split="within-task", history=dataset)
    with pytest.raises(ValueError, match="nothing to pretrain on"):
        evaluate(dataset, "xgb-reg", "itervar", history=other)


def test_knob_features_are_space_specific():
    assert space_specific("knob") and space_specific("knob+itervar")
    assert not space_specific("itervar") and not space_specific("curve+itervar")


# -- metrics ---------------------------------------------------------------------------------------

def test_perfect_oracle_scores_one_everywhere(dataset, bank):
    for split in ("by-task", "within-task"):
        report = evaluate(dataset, oracle_factory(dataset), "itervar", split=split, bank=bank)
        assert len(report.scores) == len(dataset) and not report.skipped
        for s in report.scores:
            for m in METRICS:
                assert s.metric(m) in (None, pytest.approx(1.0)), (split, s.task, m)
        assert report.mean()["pearson"] == pytest.approx(1.0)
        assert report.mean()["top10"] == pytest.approx(1.0)
    by_task = evaluate(dataset, oracle_factory(dataset), "itervar", bank=bank)
    mm_a = next(s for s in by_task.scores if s.task == "mm_a")
    assert (mm_a.n_test, mm_a.n_failed) == (PER_TASK - 4, 4)  # failures are not scored


def test_score_task_reports_topk_only_with_enough_records(dataset):
    data = dataset.get("dense")
    truth = np.array([1.0 / r.cost for r in data.results])
    reverse = score_task(data, -truth, n_train=0, ks=(10, 50))
    assert reverse.pearson < -0.9 and reverse.pairwise == 0.0
    assert dict(reverse.topk)[50] is None  # 40 records: can't pick 50 out of >= 100
    assert 0.0 < dict(reverse.topk)[10] < 0.8  # the 10 slowest instead of the 10 fastest


def test_xgboost_transfers_with_loop_features_and_refuses_knob_across_spaces(dataset, bank):
    report = evaluate(dataset, "xgb-reg", "knob+itervar", bank=bank)
    _in_range(report)
    # knob rows of matmul and dense have one width; the convolution's space is different
    assert [t for t, _ in report.skipped] == ["conv"]
    assert "within-task" in report.skipped[0][1]
    assert sorted(s.task for s in report.scores) == ["dense", "mm_a", "mm_b"]
    assert all(s.n_train == 2 * PER_TASK for s in report.scores)  # the two others of its width
    assert report.mean()["pearson"] > 0.5  # the law is learnable from the loop nest

    transfer = evaluate(dataset, "xgb-rank", "itervar", bank=bank)
    _in_range(transfer)
    assert len(transfer.scores) == len(dataset) and transfer.mean()["spearman"] > 0.5


def test_finetuning_alone_scores_a_task_without_peers(dataset, bank):
    report = evaluate(dataset, "xgb-rank", "knob", holdout=["conv"], finetune=8, bank=bank)
    (s,) = report.scores
    assert s.task == "conv" and s.n_train == 8 and s.n_test == PER_TASK - 8
    assert s.note.startswith("no transfer")
    _in_range(report)
    # 32 test records can't yield a top-50 (needs 100) but do a top-10: counts say so
    assert report.counts() == {"pearson": 1, "spearman": 1, "pairwise": 1, "top10": 1, "top50": 0}
    assert report.to_json()["counts"]["top50"] == 0


def test_finetuning_on_almost_every_record_skips_the_task_instead_of_scoring_two(dataset, bank):
    report = evaluate(dataset, "xgb-reg", "itervar", holdout=["dense"], finetune=PER_TASK - 2,
                      bank=bank)
    assert not report.scores
    (task, reason), = report.skipped
    assert task == "dense"
    assert reason.startswith("2 successful test record(s) left")
    assert reason.endswith(f"after fine-tuning on {PER_TASK - 2}")


def test_within_task_split_trains_one_model_per_task(dataset, bank):
    report = evaluate(dataset, "xgb-reg", "knob", split="within-task", bank=bank)
    assert len(report.scores) == len(dataset)
    assert all(s.n_train == PER_TASK // 2 for s in report.scores)
    _in_range(report)


def test_gtuner_transfers_to_an_unseen_task(dataset, bank):
    report = evaluate(dataset, "gtuner", "itervar", holdout=["mm_b"], bank=bank,
                      keep_predictions=True)
    (s,) = report.scores
    assert s.task == "mm_b" and s.n_train == 3 * PER_TASK
    _in_range(report)
    assert s.spearman > 0.3
    scores, results = report.predictions["mm_b"]
    assert len(scores) == len(results) == PER_TASK


def test_compare_runs_every_combination(dataset, bank):
    reports = compare(dataset, ["xgb-rank", "xgb-reg"], ["knob", "itervar"], bank=bank,
                      holdout=["dense"])
    assert [(r.model, r.features) for r in reports] == [
        ("xgb-rank", "knob"), ("xgb-reg", "knob"), ("xgb-rank", "itervar"), ("xgb-reg", "itervar")]
    assert set(default_feature_sets()) >= {"knob", "itervar", "curve", "knob+itervar",
                                           "itervar+cache"}


# -- command line ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cli():
    app = typer.Typer()
    register(app)
    return app


def _last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def test_cli_eval_prints_per_task_metrics_and_json(cli, dataset_path):
    result = CliRunner().invoke(cli, ["costmodel", "eval", "--dataset", str(dataset_path),
                                      "--model", "xgb-rank", "--features", "knob",
                                      "--holdout", "mm_b,conv", "--json"])
    assert result.exit_code == 0, result.output
    doc = _last_json(result.stdout)
    assert doc["model"] == "xgb-rank" and [t["task"] for t in doc["tasks"]] == ["mm_b"]
    assert doc["skipped"][0]["task"] == "conv" and set(doc["mean"]) == set(METRICS)


def test_cli_compare_json_has_a_row_per_combination(cli, dataset_path):
    result = CliRunner().invoke(cli, ["costmodel", "compare", "--dataset", str(dataset_path),
                                      "--models", "xgb-rank,xgb-reg,gtuner",
                                      "--features", "knob,itervar", "--holdout", "mm_a",
                                      "--json"])
    assert result.exit_code == 0, result.output
    doc = _last_json(result.stdout)
    combos = {(r["model"], r["features"]) for r in doc["rows"]}
    models, features = ("xgb-rank", "xgb-reg", "gtuner"), ("knob", "itervar")
    assert combos == {(m, f) for m in models for f in features}
    for row in doc["rows"]:
        assert [t["task"] for t in row["tasks"]] == ["mm_a"]
        assert -1.0 <= row["mean"]["pearson"] <= 1.0


def test_cli_compare_pretrains_on_a_history_dataset(cli, dataset_path, tmp_path):
    other = tmp_path / "other.jsonl"
    write_synthetic(other, seed=5, target={**TARGET, "mcpu": "znver3"}, names=("dense",))
    result = CliRunner().invoke(cli, ["costmodel", "compare", "--dataset", str(other),
                                      "--history", str(dataset_path), "--models", "xgb-reg",
                                      "--features", "itervar", "--json"])
    assert result.exit_code == 0, result.output
    doc = _last_json(result.stdout)
    assert doc["history"] == str(dataset_path) and not doc["history_twins"]
    (row,) = doc["rows"]
    assert [(t["task"], t["n_train"]) for t in row["tasks"]] == [("dense", 3 * PER_TASK)]


def test_cli_compare_pools_the_tasks_of_several_datasets_into_its_folds(cli, dataset_path,
                                                                        tmp_path):
    """--also: another file's tasks are trained and scored like --dataset's; a name taken
    already is told apart by its key, and twins across the files share a fold."""
    other = tmp_path / "more.jsonl"
    write_synthetic(other, seed=7, target={**TARGET, "mcpu": "znver3"}, names=("mm_b", "dense"))
    result = CliRunner().invoke(cli, ["costmodel", "compare", "--dataset", str(dataset_path),
                                      "--also", str(other), "--models", "xgb-reg",
                                      "--features", "itervar", "--folds", "2", "--json"])
    assert result.exit_code == 0, result.output
    doc = _last_json(result.stdout)
    assert doc["also"] == [str(other)]
    (row,) = doc["rows"]
    tasks = {t["task"]: t for t in row["tasks"]}
    assert len(tasks) == 6 and {"mm_b", "dense", "mm_a", "conv"} <= set(tasks)
    twins = [n for n in tasks if "#" in n]
    assert sorted(n.split("#")[0] for n in twins) == ["dense", "mm_b"]
    for name in twins:  # scored together with its twin: trained on neither
        base = name.split("#")[0]
        assert tasks[name]["n_train"] == tasks[base]["n_train"]
    again = CliRunner().invoke(cli, ["costmodel", "eval", "--dataset", str(dataset_path),
                                     "--also", str(dataset_path), "--features", "itervar"])
    # the message is wrapped to the terminal's width, which differs from one runner to another
    assert again.exit_code == 2 and "repeats tasks" in " ".join(again.output.split())


def test_cli_compare_by_model_reports_each_held_out_model(cli, tmp_path):
    net_a, net_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_synthetic(net_a, names=("mm_a", "conv"), source="net_a")
    write_synthetic(net_b, seed=3, names=("mm_b", "dense"), source="net_b")
    result = CliRunner().invoke(cli, ["costmodel", "compare", "--dataset", str(net_a),
                                      "--also", str(net_b), "--models", "xgb-reg",
                                      "--features", "itervar", "--split", "by-model", "--json"])
    assert result.exit_code == 0, result.output
    assert "per held-out model" in result.output
    (row,) = _last_json(result.stdout)["rows"]
    assert {src: m["tasks"] for src, m in row["by_source"].items()} == {"net_a": 2, "net_b": 2}
    assert {t["task"]: t["source"] for t in row["tasks"]} == {
        "mm_a": "net_a", "conv": "net_a", "mm_b": "net_b", "dense": "net_b"}
    for task in row["tasks"]:  # trained on the other network only
        assert task["n_train"] == 2 * PER_TASK


def test_cli_refuses_unknown_models_and_features(cli, dataset_path):
    runner = CliRunner()
    bad_model = runner.invoke(cli, ["costmodel", "eval", "--dataset", str(dataset_path),
                                    "--model", "svm"])
    assert bad_model.exit_code == 2 and "unknown cost model" in bad_model.output
    bad_features = runner.invoke(cli, ["costmodel", "eval", "--dataset", str(dataset_path),
                                       "--features", "knob+magic"])
    assert bad_features.exit_code == 2 and "magic" in bad_features.output
    missing = runner.invoke(cli, ["costmodel", "compare", "--dataset", "/nonexistent.jsonl"])
    assert missing.exit_code == 2 and "no such dataset" in missing.output
