"""Training the shipped cost model (``cost_model.PretrainedModel``) from datasets, reproducibly.

``train_pretrained`` fits XGBoost regression on absolute throughput over every task of the
datasets given, with the settings that ranked unseen networks best (docs/cost-models.md:
``itervar+hardware+roofline``, 600 rounds at eta 0.05, depth 6, 80% of rows and columns), and
records what went in: the datasets (path, SHA-256, tasks, records), the feature set, the TVM
and XGBoost versions, the seed, and, when asked, the scores of the same model on held-out
networks (leave one model out).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

import numpy as np

from ..cost_model.base import task_flops, throughput_labels
from ..dataset import Dataset
from .harness import FeatureBank

DEFAULT_FEATURES = "itervar+hardware+roofline"
BASE_PARAMS = {"objective": "reg:squarederror", "max_depth": 6, "eta": 0.05, "gamma": 1e-4,
               "min_child_weight": 1, "subsample": 0.8, "colsample_bytree": 0.8,
               "tree_method": "hist", "verbosity": 0}
BASE_ROUNDS = 600


def training_rows(datasets: Sequence[Dataset], features: str, bank: FeatureBank,
                  on_task: Callable[[str], None] | None = None):
    """Features and absolute-throughput labels (TFLOP/s) of every task with a FLOP count."""
    xs, ys = [], []
    for ds in datasets:
        for data in ds:
            flops = task_flops(data.task)
            if flops <= 0 or data.n_ok == 0:
                continue
            xs.append(bank.get(features).extract(list(data.inputs)))
            ys.append(throughput_labels(list(data.results), flops, "absolute"))
            if on_task:
                on_task(data.name)
    widths = {x.shape[1] for x in xs}
    if len(widths) > 1:
        raise ValueError(f"tasks give feature rows of different widths {sorted(widths)}; "
                         f"{features!r} must not depend on the task's space")
    if not xs:
        raise ValueError("no task with a FLOP count and a successful record to train on")
    return np.concatenate(xs), np.concatenate(ys)


def train_pretrained(datasets: Sequence[Dataset], features: str = DEFAULT_FEATURES,
                     bank: FeatureBank | None = None, seed: int = 0, threads: int = 2,
                     holdout_scores: dict | None = None,
                     on_task: Callable[[str], None] | None = None):
    """A ``PretrainedModel`` fitted on all of ``datasets`` (see the module docstring);
    ``holdout_scores`` (e.g. from ``evaluate(..., split="by-model")``) go into its provenance."""
    import tvm
    import xgboost as xgb

    from ..cost_model.pretrained import PretrainedModel

    bank = bank or FeatureBank()
    x, y = training_rows(datasets, features, bank, on_task)
    scale = float(y.max())
    params = {**BASE_PARAMS, "seed": seed, "nthread": threads}
    booster = xgb.train(params, xgb.DMatrix(x, label=y / scale), num_boost_round=BASE_ROUNDS)
    provenance = {
        "trained": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "datasets": [_describe(ds) for ds in datasets], "features": features,
        "rows": int(len(y)), "label": "absolute TFLOP/s over label_scale",
        "params": {**BASE_PARAMS, "seed": seed, "rounds": BASE_ROUNDS},
        "tvm": tvm.__version__, "xgboost": xgb.__version__,
        "holdout": holdout_scores or {},
    }
    return PretrainedModel(booster, bank.get(features), scale, provenance, seed=seed)


def _describe(ds: Dataset) -> dict:
    digest = hashlib.sha256(ds.path.read_bytes()).hexdigest() if ds.path else None
    targets = sorted({t.task.target.get("mcpu", t.task.target.get("kind", "?")) for t in ds})
    return {"path": str(ds.path), "sha256": digest, "tasks": len(ds), "records": ds.n_records,
            "targets": targets}
