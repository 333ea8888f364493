"""The tuner: the evaluator (one door to measurement), the loop, and ``tune_task``."""
from .api import MODEL_TUNERS, SEARCHES, TUNERS, make_loop, tune_task
from .evaluator import Evaluator
from .loop import TuneLoop, TuneResult

__all__ = ["Evaluator", "TuneLoop", "TuneResult", "TUNERS", "MODEL_TUNERS", "SEARCHES", "make_loop", "tune_task"]
