"""``XGBoostModel``: gradient-boosted trees over a feature extractor (AutoTVM's XGBTuner model)."""
from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..features import FeatureExtractor, make_extractor
from ..measure.types import MeasureInput, MeasureResult
from .base import LABELS, CostModel, ModelSpec, scale_labels, task_flops, throughput_labels

OBJECTIVES = {"rank": "rank:pairwise", "reg": "reg:squarederror"}
FORMAT = "tensortune.xgb"


class XGBoostModel(CostModel):
    """Scores candidates by predicted throughput rank (``"rank"``) or normalized throughput (``"reg"``).

    Labels (``label``) are throughput in TFLOP/s (``"absolute"``, the default) or, as in
    AutoTVM, ``(1 / mean cost) / best`` within each task (``"relative"``); failed measurements
    get 0. Within one task the two differ by a constant factor; across tasks only absolute
    labels agree on what a fast kernel is (held-out Pearson 0.87 to 0.89 with
    ``itervar+hardware+roofline``). Until
    ``min_good`` successful measurements have been seen, ``predict`` returns zeros (no opinion).
    ``pretrain`` supplies history (earlier runs, other tasks): later fits train on the union with
    the history down-weighted by ``history_weight``. Training runs on the CPU with one thread,
    since the other core is measuring.

    Boosting is slow and subsampled (600 rounds at ``eta`` 0.05, 80% of rows and of columns per
    tree) rather than AutoTVM's 120 rounds at 0.3: on this project's dataset that raised the
    held-out Pearson from 0.80 to 0.85 (by-task, ``itervar+hardware``) and from 0.63 to 0.71
    within tasks (``knob``, 60% of records to train on).
    """

    def __init__(self, extractor: FeatureExtractor, objective: str = "rank", seed: int = 0,
                 num_boost_round: int = 600, history_weight: float = 0.5, min_good: int = 4,
                 max_depth: int = 6, eta: float = 0.05, subsample: float = 0.8,
                 colsample: float = 0.8, label: str = "absolute"):
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
        if label not in LABELS:
            raise ValueError(f"unknown label {label!r}; choose one of {', '.join(LABELS)}")
        for name, share in (("subsample", subsample), ("colsample", colsample)):
            if not 0.0 < share <= 1.0:
                raise ValueError(f"{name} is a share of rows or columns in (0, 1], got {share}")
        self.extractor = extractor
        self.objective = objective
        self.seed = seed
        self.num_boost_round = num_boost_round
        self.history_weight = history_weight
        self.min_good = min_good
        self.max_depth = max_depth
        self.eta = eta
        self.subsample = subsample
        self.colsample = colsample
        self.label = label
        self._booster = None
        self._dim: int | None = None
        self._history: list[tuple[MeasureInput, MeasureResult]] = []

    @property
    def trained(self) -> bool:
        return self._booster is not None

    # -- training ----------------------------------------------------------------------------------
    def fit(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Retrain from scratch on these measurements plus any pretraining history."""
        if len(inputs) != len(results):
            raise ValueError(f"{len(inputs)} inputs but {len(results)} results")
        new = list(zip(inputs, results))
        fresh = {(i.task, i.config) for i, _ in new}
        history = [(i, r) for i, r in self._history if (i.task, i.config) not in fresh]
        self._train(new, history)

    def pretrain(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Keep ``inputs``/``results`` as history for every later ``fit``, and fit on them now."""
        if len(inputs) != len(results):
            raise ValueError(f"{len(inputs)} inputs but {len(results)} results")
        self._history = list(zip(inputs, results))
        self._train([], self._history)

    def _train(self, new: list, history: list) -> None:
        import xgboost as xgb

        groups = _by_task(new, 1.0) + _by_task(history, self.history_weight)
        features = []
        for pairs, weight in groups:
            x = self.extractor.extract([i for i, _ in pairs])
            y = throughput_labels([r for _, r in pairs], task_flops(pairs[0][0].task),
                                  self.label)
            features.append((x, y, weight))
        if not features:
            self._booster, self._dim = None, None
            return
        dim = features[0][0].shape[1]  # the newest task's width; others must match it to join
        features = [f for f in features if f[0].shape[1] == dim]
        good = sum(int((y > 0).sum()) for _, y, _ in features)
        if good < self.min_good:
            self._booster, self._dim = None, None
            return
        x = np.concatenate([f[0] for f in features])
        # absolute labels keep their ratios across tasks but are brought to [0, 1]: split gains
        # (gamma) and leaf weights are tuned for labels of that scale, not 1e-5 TFLOP/s
        y = scale_labels(np.concatenate([f[1] for f in features]))
        if self.objective == "rank":
            # pairs are formed within a group only, and xgboost weights ranking groups, not rows
            qid = np.concatenate([np.full(len(f[1]), g) for g, f in enumerate(features)])
            dtrain = xgb.DMatrix(x, label=y, qid=qid)
            dtrain.set_weight(np.array([f[2] for f in features], dtype=np.float32))
        else:
            w = np.concatenate([np.full(len(f[1]), f[2], dtype=np.float32) for f in features])
            dtrain = xgb.DMatrix(x, label=y, weight=w)
        self._booster = xgb.train(self._params(), dtrain, num_boost_round=self.num_boost_round)
        self._dim = dim

    def _params(self) -> dict:
        params = {
            "objective": OBJECTIVES[self.objective], "max_depth": self.max_depth, "eta": self.eta,
            "gamma": 1e-4, "min_child_weight": 1, "subsample": self.subsample,
            "colsample_bytree": self.colsample, "lambda": 1.0, "alpha": 0.0,
            "tree_method": "hist", "device": "cpu", "nthread": 1, "seed": self.seed,
            "verbosity": 0,
        }
        if self.objective == "rank":
            # sample pairs across the whole group; the default "topk" only pairs the top few
            params.update(lambdarank_pair_method="mean", lambdarank_num_pair_per_sample=8)
        return params

    # -- inference ----------------------------------------------------------------------------------
    def predict(self, inputs: Sequence[MeasureInput]) -> np.ndarray:
        """One score per input, higher = predicted faster; zeros while the model has no opinion
        (too few measurements, or trained on features of another width)."""
        if not inputs or self._booster is None:
            return np.zeros(len(inputs))
        import xgboost as xgb

        x = self.extractor.extract(inputs)
        if x.shape[1] != self._dim:
            return np.zeros(len(inputs))
        return self._booster.predict(xgb.DMatrix(x)).astype(np.float64)

    # -- persistence --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write the model (trees and settings, not the training data) as one JSON file."""
        doc = {
            "format": FORMAT, "version": 1, "extractor": self.extractor.name,
            "objective": self.objective, "seed": self.seed, "num_boost_round": self.num_boost_round,
            "history_weight": self.history_weight, "min_good": self.min_good,
            "max_depth": self.max_depth, "eta": self.eta, "subsample": self.subsample,
            "colsample": self.colsample, "label": self.label, "dim": self._dim,
            "booster": (base64.b64encode(bytes(self._booster.save_raw("ubj"))).decode()
                        if self._booster is not None else None),
        }
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path, extractor: FeatureExtractor | None = None) -> "XGBoostModel":
        """Read a model written by ``save``; the extractor is rebuilt by name unless given."""
        doc = json.loads(Path(path).read_text())
        if doc.get("format") != FORMAT:
            raise ValueError(f"{path}: not a tensortune XGBoost model")
        model = cls(extractor or make_extractor(doc["extractor"]), doc["objective"], doc["seed"],
                    doc["num_boost_round"], doc["history_weight"], doc["min_good"],
                    doc["max_depth"], doc["eta"],
                    # files written before these settings existed trained on every row and column
                    doc.get("subsample", 1.0), doc.get("colsample", 1.0),
                    doc.get("label", "relative"))
        if doc["booster"] is not None:
            import xgboost as xgb

            booster = xgb.Booster(params={"nthread": 1})
            booster.load_model(bytearray(base64.b64decode(doc["booster"])))
            model._booster, model._dim = booster, doc["dim"]
        return model


SPEC = ModelSpec("xgb", "XGBoost, AutoTVM's model", XGBoostModel, objectives=("rank", "reg"))


def _by_task(pairs: list, weight: float) -> list[tuple[list, float]]:
    """Measurements grouped by task (labels are normalized per task), in first-seen order."""
    groups: dict = {}
    for inp, res in pairs:
        groups.setdefault(inp.task, []).append((inp, res))
    return [(g, weight) for g in groups.values()]
