"""Feature extractors: candidates (task, config) to fixed-width float rows for cost models.

One module per extractor (plus ``base``, ``isolate``: rows in worker processes, ``store``: rows
kept on disk); the analyses of generated code they share with the builders (assembly, PTX,
loops) are in ``tensortune.analysis``.
"""
from __future__ import annotations

from .base import CachedExtractor, ConcatFeatures, FeatureExtractor
from .cache import CacheFeatures
from .curve import CurveFeatures
from .graph import GraphFeatures, TaskGraph, task_graph
from .hardware_cpu import HardwareCPUFeatures
from .hardware_cuda import HardwareCUDAFeatures
from .itervar import IterVarFeatures, feature_names
from .knob import KnobFeatures
from .ilp import IlpFeatures
from .roofline import RooflineFeatures

EXTRACTORS = {"knob": KnobFeatures, "itervar": IterVarFeatures, "curve": CurveFeatures,
              "graph": GraphFeatures, "hardware": HardwareCPUFeatures,
              "hardware_cuda": HardwareCUDAFeatures, "roofline": RooflineFeatures,
              "cache": CacheFeatures, "ilp": IlpFeatures}


def make_extractor(names: str | list[str]) -> FeatureExtractor:
    """An extractor by name; ``"knob+itervar"`` (or a list of names) concatenates several.

    An extractor derived from another (``roofline`` from ``hardware``) shares that part when both
    are named, so each candidate is compiled once."""
    parts = names.split("+") if isinstance(names, str) else list(names)
    parts = [p.strip() for p in parts if p.strip()]
    unknown = [p for p in parts if p not in EXTRACTORS]
    if unknown or not parts:
        raise ValueError(f"unknown feature extractor(s) {unknown or names!r}; "
                         f"known: {', '.join(EXTRACTORS)}")
    built: dict[str, FeatureExtractor] = {}
    for p in parts:
        built[p] = build_part(p, built)
    extractors = [built[p] for p in parts]
    return extractors[0] if len(extractors) == 1 else ConcatFeatures(extractors)


def build_part(name: str, built: dict) -> FeatureExtractor:
    """A new extractor ``name``; one derived from another takes its source from ``built`` (a
    name -> extractor map of the parts made so far) when there, else builds its own."""
    cls = EXTRACTORS[name]
    source = cls.source
    if source is None:
        return cls()
    return cls(built[source]) if source in built else cls()


__all__ = ["build_part", "CacheFeatures", "RooflineFeatures", "FeatureExtractor",
           "CachedExtractor", "ConcatFeatures", "KnobFeatures", "IterVarFeatures",
           "feature_names", "make_extractor", "EXTRACTORS", "CurveFeatures", "GraphFeatures",
           "TaskGraph", "task_graph", "HardwareCPUFeatures", "HardwareCUDAFeatures", "IlpFeatures"]
