"""The facade: a model in, a tuned, saved, runnable module out (``facade.Session``), over the
stages' values and functions (``values``: imported model -> tasks -> tuned records -> built
module -> saved run), with a run's bookkeeping (``runs``)."""
from .facade import Session
from .runs import RUN_FILE, SessionError, list_runs, model_from_spec, task_label
from .values import BuiltModel, ExtractedTasks, ImportedModel, SavedRun, TunedRecords

__all__ = ["Session", "SessionError", "RUN_FILE", "list_runs", "model_from_spec", "task_label",
           "BuiltModel", "ExtractedTasks", "ImportedModel", "SavedRun", "TunedRecords"]
