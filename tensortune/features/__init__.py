"""Feature extractors: candidates (task, config) to fixed-width float rows for cost models."""
from __future__ import annotations

from .base import CachedExtractor, ConcatFeatures, FeatureExtractor
from .curve import CurveFeatures
from .graph import GraphFeatures, TaskGraph, task_graph
from .hardware_cpu import HardwareCPUFeatures
from .hardware_cuda import HardwareCUDAFeatures
from .itervar import IterVarFeatures, feature_names
from .knob import KnobFeatures

EXTRACTORS = {"knob": KnobFeatures, "itervar": IterVarFeatures, "curve": CurveFeatures,
              "graph": GraphFeatures, "hardware": HardwareCPUFeatures,
              "hardware_cuda": HardwareCUDAFeatures}


def make_extractor(names: str | list[str]) -> FeatureExtractor:
    """An extractor by name; ``"knob+itervar"`` (or a list of names) concatenates several."""
    parts = names.split("+") if isinstance(names, str) else list(names)
    parts = [p.strip() for p in parts if p.strip()]
    unknown = [p for p in parts if p not in EXTRACTORS]
    if unknown or not parts:
        raise ValueError(f"unknown feature extractor(s) {unknown or names!r}; "
                         f"known: {', '.join(EXTRACTORS)}")
    extractors = [EXTRACTORS[p]() for p in parts]
    return extractors[0] if len(extractors) == 1 else ConcatFeatures(extractors)


__all__ = ["FeatureExtractor", "CachedExtractor", "ConcatFeatures", "KnobFeatures",
           "IterVarFeatures", "feature_names", "make_extractor", "EXTRACTORS", "CurveFeatures",
           "GraphFeatures", "TaskGraph", "task_graph", "HardwareCPUFeatures", "HardwareCUDAFeatures"]
