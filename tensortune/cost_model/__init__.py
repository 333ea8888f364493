"""Cost models: learn from measurements, score unmeasured candidates for the search."""
from .base import CostModel, normalized_throughput, pairwise_accuracy
from .ensemble import EnsembleModel, default_ensemble
from .gtuner import GTunerModel
from .prescreen import Prescreened
from .pretrained import PretrainedModel
from .xgb import XGBoostModel

__all__ = ["CostModel", "XGBoostModel", "GTunerModel", "EnsembleModel", "default_ensemble", "Prescreened", "PretrainedModel", "normalized_throughput", "pairwise_accuracy"]
