"""The tuner: the evaluator (one door to measurement), the loop, and ``tune_task``."""
from .api import (COST_MODELS, MODEL_TUNERS, SEARCHES, TUNERS, describe, fresh_model,
                  make_loop, pretrained_model, tune_task)
from .evaluator import BuildLimit, Evaluator
from .loop import TuneLoop, TuneResult

__all__ = ["BuildLimit", "Evaluator", "TuneLoop", "TuneResult", "TUNERS", "MODEL_TUNERS", "SEARCHES", "fresh_model", "make_loop", "tune_task",
           "COST_MODELS", "pretrained_model", "describe"]
