"""The shipped CUDA cost model: XGBoost over ``hardware_cuda`` rows, trained on GPU timings.

The timings file holds one JSON line per candidate a GPU timed (``benchmarks/bench_cuda_model.py
--save`` writes it from timed batches): the task, the config, the ``hardware_cuda`` row its build
saved (nvcc's PTX and ptxas report) and the measured seconds. The model learns absolute
throughput (TFLOP/s) as the CPU's ``PretrainedModel`` does, so it ranks configs of operators it
never saw; its provenance holds the same model's scores on each workload when that workload was
left out of training.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import statistics
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .pretrain import BASE_PARAMS

CUDA_ROUNDS = 300  # a few thousand rows of 36 features: more rounds only fit the noise
FAILED_ROWS = 50  # of each kind of failed config, labelled 0


def load_timings(path: str | Path) -> list[dict]:
    """The timed candidates of a timings file: each with ``task``, ``config``, ``row`` (numpy),
    ``seconds``, ``tflops`` and ``workload`` (a name to group by)."""
    from ..workload import workload_from_dict

    out = []
    with gzip.open(path, "rt") as f:
        for line in f:
            it = json.loads(line)
            workload = workload_from_dict(it["task"]["workload"])
            seconds = float(it["seconds"])
            out.append({"task": it["task"], "config": it["config"], "seconds": seconds,
                        "row": np.asarray(it["row"], dtype=np.float32),
                        "tflops": workload.flops / seconds / 1e12, "workload": workload.key,
                        "device": it.get("device", "")})
    if not out:
        raise ValueError(f"{path}: no timed candidates")
    return out


def _fit(x: np.ndarray, y: np.ndarray, seed: int, threads: int):
    import xgboost as xgb

    from ..features.hardware_cuda import flagged_row

    # timings hold only configs that ran; without these rows a config the template refuses or
    # nvcc cannot build (a constant flagged row) would get whatever the trees extrapolate to,
    # and a search would chase them
    failed = np.stack([flagged_row("invalid"), flagged_row("nvcc_failed")] * FAILED_ROWS)
    x = np.concatenate([x, failed])
    y = np.concatenate([y, np.zeros(len(failed))])
    params = {**BASE_PARAMS, "seed": seed, "nthread": threads}
    return xgb.train(params, xgb.DMatrix(x, label=y), num_boost_round=CUDA_ROUNDS)


def holdout_scores(items: list[dict], seed: int = 0, threads: int = 2) -> dict:
    """Per workload, Pearson and top-10 ratio of the model trained without it."""
    import xgboost as xgb

    from ..cost_model.metrics import pearson, topk_ratio

    names = sorted({it["workload"] for it in items})
    scores = {}
    for name in names:
        train = [it for it in items if it["workload"] != name]
        test = [it for it in items if it["workload"] == name]
        if not train:
            continue
        scale = max(it["tflops"] for it in train)
        booster = _fit(np.stack([it["row"] for it in train]),
                       np.asarray([it["tflops"] / scale for it in train]), seed, threads)
        pred = booster.predict(xgb.DMatrix(np.stack([it["row"] for it in test])))
        secs = np.asarray([it["seconds"] for it in test])
        scores[name] = {"pearson": round(pearson(pred, 1.0 / secs), 4),
                        "top10": round(topk_ratio(pred, secs, min(10, len(secs))), 4),
                        "n": len(test)}
    if scores:
        scores["mean"] = {k: round(statistics.mean(s[k] for s in scores.values()), 4)
                          for k in ("pearson", "top10")}
    return scores


def train_cuda(path: str | Path, arch: str = "sm_90", seed: int = 0, threads: int = 2):
    """A ``PretrainedModel`` over ``hardware_cuda`` fitted on every timing in ``path``."""
    import tvm
    import xgboost as xgb

    from ..cost_model.pretrained import PretrainedModel
    from ..features.hardware_cuda import HardwareCUDAFeatures

    items = load_timings(path)
    y = np.asarray([it["tflops"] for it in items])
    scale = float(y.max())
    booster = _fit(np.stack([it["row"] for it in items]), y / scale, seed, threads)
    provenance = {
        "trained": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "timings": {"path": str(path), "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest(),
                    "rows": len(items), "workloads": len({it["workload"] for it in items}),
                    "devices": sorted({it["device"] for it in items})},
        "features": "hardware_cuda", "arch": arch,
        "label": "absolute TFLOP/s over label_scale",
        "params": {**BASE_PARAMS, "seed": seed, "rounds": CUDA_ROUNDS},
        "tvm": tvm.__version__, "xgboost": xgb.__version__,
        "holdout": holdout_scores(items, seed, threads),
    }
    return PretrainedModel(booster, HardwareCUDAFeatures(arch=arch), scale, provenance,
                           seed=seed)
