"""How good is a cost model on a dataset: it is fitted on some tasks and scored on others.

* ``splits``: by-task and leave-one-model-out folds (twins kept out of training), a history
  dataset to pretrain on, random record splits for fine-tuning.
* ``scores``: per-task metrics (Pearson, Spearman, pairwise accuracy, top-k ratios) and an
  evaluation's report with its means, overall and per source model.
* ``harness``: ``evaluate`` and ``compare`` (models x feature sets), the model factory and the
  ``FeatureBank`` that serves stored feature rows.
* ``pretrain``: ``train_pretrained``, the shipped cost model fitted on datasets, with provenance.

    report = evaluate(load_dataset("data/cpu.jsonl.gz"), "xgb-reg", "itervar+hardware+roofline")
    print(report.mean())
"""
from .harness import (
    MIN_SCORED,
    MODELS,
    SPLITS,
    FeatureBank,
    available_features,
    compare,
    default_feature_sets,
    evaluate,
    make_model,
    space_specific,
)
from .pretrain import train_pretrained
from .scores import METRICS, TOPK, EvalReport, TaskScore, score_task
from .splits import Fold, history_fold, model_folds, record_split, task_folds

__all__ = ["MODELS", "SPLITS", "TOPK", "MIN_SCORED", "METRICS", "make_model", "available_features",
           "default_feature_sets", "FeatureBank", "space_specific", "Fold", "task_folds",
           "model_folds", "history_fold", "record_split", "TaskScore", "score_task", "EvalReport",
           "evaluate", "compare", "train_pretrained"]
