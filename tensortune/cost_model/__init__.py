"""Cost models: learn from measurements, score unmeasured candidates for the search.

``MODELS`` is the registry: every model by name, with a one-line summary and how to make one
(``base.ModelSpec``). The tuner names, the CLI's choices and help and the evaluation harness
read it; a new model is one module declaring its ``SPEC`` and one line here."""
from . import ensemble, gpu_analytic, gtuner, pretrained, xgb
from .base import (Adapted, CostModel, ModelSpec, as_cost_model, normalized_throughput,
                   pairwise_accuracy)
from .ensemble import EnsembleModel, default_ensemble
from .gtuner import GTunerModel
from .prescreen import Prescreened
from .pretrained import PretrainedModel
from .xgb import XGBoostModel

MODELS: dict[str, ModelSpec] = {
    "xgb": xgb.SPEC,
    "gtuner": gtuner.SPEC,
    "ensemble": ensemble.SPEC,
    "pretrained": pretrained.SPEC,
    "gpu-analytic": gpu_analytic.SPEC,
}

__all__ = ["MODELS", "ModelSpec", "CostModel", "Adapted", "as_cost_model", "XGBoostModel",
           "GTunerModel", "EnsembleModel", "default_ensemble", "Prescreened", "PretrainedModel",
           "normalized_throughput", "pairwise_accuracy"]
