"""``PretrainedModel``: a cost model trained once on the project's datasets, shipped with the
package, and fine-tuned on each task's own measurements while it is tuned.

The base is XGBoost regression on absolute throughput (TFLOP/s, over the training set's best
so labels lie in [0, 1]) over compile-time features, which mean the same thing on every task;
that is what lets it rank configs of networks it never saw (docs/cost-models.md). Fine-tuning
does not retrain it: a few more trees are boosted on top of the base from the task's own
measurements (XGBoost's continued training), so the base's knowledge stays and the new trees
learn the task's residuals. Until ``min_good`` configs of the task have run, the base alone
predicts.

Files are JSON with the booster in XGBoost's own JSON model format and the training provenance
beside it; nothing is pickled.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..features import FeatureExtractor, make_extractor
from ..measure.types import MeasureInput, MeasureResult
from .base import CostModel, ModelSpec, task_flops, throughput_labels

FORMAT = "tensortune.pretrained"
SHIPPED_CPU = Path(__file__).with_name("shipped") / "cpu.json"
# the same recipe on cheap features (no compilation): the search's prescreen
SHIPPED_CPU_CHEAP = Path(__file__).with_name("shipped") / "cpu-itervar.json"
# hardware_cuda rows and H100 timings (evaluation.pretrain_cuda): hardware-free tuning for sm_90
SHIPPED_CUDA = {"sm_90": Path(__file__).with_name("shipped") / "cuda-sm90.json"}


class PretrainedModel(CostModel):
    """The base booster over ``extractor`` plus ``finetune_rounds`` trees per fit from the
    task's measurements (see the module docstring). ``label_scale`` is the TFLOP/s the base's
    label 1.0 stands for; ``provenance`` says what it was trained on."""

    def __init__(self, booster, extractor: FeatureExtractor, label_scale: float,
                 provenance: dict | None = None, finetune_rounds: int = 60, min_good: int = 4,
                 eta: float = 0.1, seed: int = 0):
        if label_scale <= 0:
            raise ValueError(f"label_scale must be positive, got {label_scale}")
        self.base = booster
        self.extractor = extractor
        self.label_scale = float(label_scale)
        self.provenance = dict(provenance or {})
        self.finetune_rounds = finetune_rounds
        self.min_good = min_good
        self.eta = eta
        self.seed = seed
        self._booster = booster  # the base until a fit adds the task's trees

    @property
    def trained(self) -> bool:
        return True

    def pretrain(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """History (earlier runs of other tasks) fine-tunes like the task's own records."""
        self.fit(inputs, results)

    def fit(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Boost ``finetune_rounds`` trees on the base from these measurements (the base alone
        while fewer than ``min_good`` of them succeeded)."""
        import xgboost as xgb

        if len(inputs) != len(results):
            raise ValueError(f"{len(inputs)} inputs but {len(results)} results")
        xs, ys = [], []
        for task, idx in _by_task(inputs).items():
            xs.append(self.extractor.extract([inputs[i] for i in idx]))
            ys.append(throughput_labels([results[i] for i in idx], task_flops(task), "absolute"))
        y = np.concatenate(ys) if ys else np.zeros(0)
        if int((y > 0).sum()) < self.min_good or self.finetune_rounds <= 0:
            self._booster = self.base
            return
        dtrain = xgb.DMatrix(np.concatenate(xs), label=y / self.label_scale)
        params = {"objective": "reg:squarederror", "max_depth": 4, "eta": self.eta,
                  "subsample": 0.8, "tree_method": "hist", "nthread": 1, "seed": self.seed,
                  "verbosity": 0}
        self._booster = xgb.train(params, dtrain, num_boost_round=self.finetune_rounds,
                                  xgb_model=self.base)

    def predict(self, inputs: Sequence[MeasureInput]) -> np.ndarray:
        """Predicted throughput over ``label_scale``, higher = faster."""
        import xgboost as xgb

        if not inputs:
            return np.zeros(0)
        x = self.extractor.extract(list(inputs))
        if x.shape[1] != self.base.num_features():
            raise ValueError(f"the pretrained model reads {self.base.num_features()} features, "
                             f"{self.extractor.name!r} gives {x.shape[1]}")
        return self._booster.predict(xgb.DMatrix(x)).astype(np.float64)

    def predicted_tflops(self, inputs: Sequence[MeasureInput]) -> np.ndarray:
        return self.predict(inputs) * self.label_scale

    # -- persistence -------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write the base (not the task's trees) and its provenance as one JSON file."""
        doc = {"format": FORMAT, "version": 1, "extractor": self.extractor.name,
               "label_scale": self.label_scale, "finetune_rounds": self.finetune_rounds,
               "min_good": self.min_good, "eta": self.eta, "provenance": self.provenance,
               "booster": json.loads(bytes(self.base.save_raw("json")))}
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, separators=(",", ":")))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path = SHIPPED_CPU, extractor: FeatureExtractor | None = None,
             seed: int = 0) -> "PretrainedModel":
        """Read a model written by ``save`` (by default the shipped CPU model)."""
        import xgboost as xgb

        path = Path(path)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise ValueError(f"{path}: not a pretrained tensortune model ({err})") from err
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"{path}: not a pretrained tensortune model")
        booster = xgb.Booster(params={"nthread": 1})
        booster.load_model(bytearray(json.dumps(doc["booster"]).encode()))
        return cls(booster, extractor or make_extractor(doc["extractor"]), doc["label_scale"],
                   doc.get("provenance"), doc.get("finetune_rounds", 60),
                   doc.get("min_good", 4), doc.get("eta", 0.1), seed)


    @classmethod
    def shipped(cls, extractor: FeatureExtractor | None = None,
                seed: int = 0) -> "PretrainedModel":
        """The shipped CPU model over ``extractor``'s features: the cheap ``itervar`` one
        (``SHIPPED_CPU_CHEAP``) by default, else the one on compiled features (``SHIPPED_CPU``)."""
        cheap = extractor is None or extractor.name == "itervar"
        model = cls.load(SHIPPED_CPU_CHEAP if cheap else SHIPPED_CPU, seed=seed)
        if extractor is not None:
            if extractor.name != model.extractor.name:
                raise ValueError(f"no shipped model reads {extractor.name!r} features; they "
                                 f"read itervar or {model.extractor.name!r}")
            model.extractor = extractor
        return model


SPEC = ModelSpec("pretrained", "the shipped model, fine-tuned on the task", PretrainedModel.shipped,
                 fresh=False, features="itervar")


def _by_task(inputs: Sequence[MeasureInput]) -> dict:
    groups: dict = {}
    for i, inp in enumerate(inputs):
        groups.setdefault(inp.task, []).append(i)
    return groups


def cuda_model(arch: str, seed: int = 0):
    """What hardware-free tuning for CUDA ``arch`` ranks with: the shipped model trained on that
    GPU generation's timings (``SHIPPED_CUDA``) where there is one, else Tuna's analytical model
    (``cost_model.gpu_analytic``), which needs no timings."""
    from ..features.hardware_cuda import HardwareCUDAFeatures

    extractor = HardwareCUDAFeatures(arch=arch)
    path = SHIPPED_CUDA.get(arch)
    if path is not None and path.exists():
        return PretrainedModel.load(path, extractor=extractor, seed=seed)
    from .gpu_analytic import AnalyticGPUModel

    return AnalyticGPUModel(extractor)
