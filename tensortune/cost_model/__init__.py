"""Cost models: learn from measurements, score unmeasured candidates for the search."""
from .base import CostModel, normalized_throughput, pairwise_accuracy
from .gtuner import GTunerModel
from .prescreen import Prescreened
from .xgb import XGBoostModel

__all__ = ["CostModel", "XGBoostModel", "GTunerModel", "Prescreened", "normalized_throughput", "pairwise_accuracy"]
