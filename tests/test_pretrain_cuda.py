"""The CUDA cost model learned from GPU timings: training, provenance, failed configs at 0, and
which model hardware-free CUDA tuning ranks with."""
from __future__ import annotations

import gzip
import json

import numpy as np
from typer.testing import CliRunner

from tensortune.cli import app
from tensortune.cost_model.gpu_analytic import AnalyticGPUModel
from tensortune.cost_model.pretrained import PretrainedModel, cuda_model
from tensortune.evaluation.pretrain_cuda import load_timings, train_cuda
from tensortune.features.hardware_cuda import FEATURE_NAMES, flagged_row

CUDA = {"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}}
WORKLOADS = [{"op": "matmul", "m": 64, "n": 64, "k": 64},
             {"op": "dense", "batch": 16, "in_features": 72, "out_features": 200}]


def timings_file(path, n: int = 30):
    """Timings whose speed follows one feature, as a GPU's would follow occupancy."""
    rng = np.random.default_rng(0)
    with gzip.open(path, "wt") as f:
        for w in WORKLOADS:
            for i in range(n):
                row = rng.uniform(0, 8, len(FEATURE_NAMES))
                row[:2] = 0.0  # neither invalid nor failed
                seconds = 1e-5 * (1.0 + row[5])
                f.write(json.dumps({"task": {"workload": w, "target": CUDA,
                                             "template": "cuda.generic"},
                                    "config": {"tile_i": [1, 1, 1, 64]}, "row": row.tolist(),
                                    "seconds": seconds, "device": "Fake H100"}) + "\n")
    return path


def test_trained_model_ranks_held_out_workloads_and_records_where_it_came_from(tmp_path):
    path = timings_file(tmp_path / "t.jsonl.gz")
    assert len(load_timings(path)) == 60
    model = train_cuda(path)
    p = model.provenance
    assert p["timings"]["rows"] == 60 and p["timings"]["devices"] == ["Fake H100"]
    assert p["features"] == "hardware_cuda" and len(p["timings"]["sha256"]) == 64
    # each workload scored by a model that never saw it: the speed follows a feature it learned
    assert len(p["holdout"]) == 3 and "mean" in p["holdout"]
    assert p["holdout"]["mean"]["pearson"] > 0.8
    assert model.compiles  # hardware_cuda rows come from nvcc
    model.save(tmp_path / "m.json")
    again = PretrainedModel.load(tmp_path / "m.json")
    assert again.extractor.name == "hardware_cuda" and again.label_scale == model.label_scale


def test_a_config_that_cannot_build_is_predicted_slowest(tmp_path):
    import xgboost as xgb

    model = train_cuda(timings_file(tmp_path / "t.jsonl.gz"))
    failed = np.stack([flagged_row("invalid"), flagged_row("nvcc_failed")])
    good = load_timings(tmp_path / "t.jsonl.gz")[0]["row"][None, :]
    pred = model.base.predict(xgb.DMatrix(np.concatenate([failed, good])))
    assert abs(pred[0]) < 0.05 and abs(pred[1]) < 0.05 and pred[2] > pred[0]


def test_hardware_free_cuda_ranks_with_the_learned_model_where_one_is_shipped():
    assert isinstance(cuda_model("sm_90"), PretrainedModel)
    assert isinstance(cuda_model("sm_80"), AnalyticGPUModel)  # no timings of that GPU yet


def test_train_cuda_cli_names_a_missing_file(tmp_path):
    result = CliRunner().invoke(app, ["costmodel", "train-cuda", "--timings",
                                      str(tmp_path / "none.gz"), "--out", str(tmp_path / "m")])
    assert result.exit_code == 2 and "no such timings file" in " ".join(result.output.split())
