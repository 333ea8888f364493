"""``Prescreened``: a costly cost model searched through a cheap one.

Models on ``hardware`` features compile every candidate they score (a fraction of a second
each), so an annealing run that scores thousands of moves per batch is out of reach for them.
Wrapped here, the search walks the space on the cheap model's scores (e.g. XGBoost on
``itervar``), keeps its ``shortlist`` x batch best distinct configs, and the costly model picks
the batch among those: a few hundred compilations per batch instead of thousands, with the
costly model still deciding what gets measured. Both models learn from every measurement.

The search reads ``prescreen`` (the cheap model) and ``shortlist``; everything else sees an
ordinary cost model whose ``predict`` is the costly one's.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..measure.types import MeasureInput, MeasureResult

FORMAT = "tensortune.prescreened"


class Prescreened:
    """``costly`` choosing among the configs ``prescreen`` rates best (see the module docstring)."""

    def __init__(self, prescreen, costly, shortlist: int = 4):
        if shortlist < 1:
            raise ValueError(f"shortlist must be at least 1, got {shortlist}")
        self.prescreen, self.costly, self.shortlist = prescreen, costly, shortlist

    @property
    def trained(self) -> bool:
        return bool(getattr(self.costly, "trained", False))

    @property
    def extractor(self):
        return self.costly.extractor

    def pretrain(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Pretrain both models on history (other tasks, earlier runs)."""
        self.prescreen.pretrain(inputs, results)
        self.costly.pretrain(inputs, results)

    def fit(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        self.prescreen.fit(inputs, results)
        self.costly.fit(inputs, results)

    def predict(self, inputs: Sequence[MeasureInput]) -> np.ndarray:
        return self.costly.predict(inputs)

    def save(self, path: str | Path) -> None:
        """Write both models beside ``path`` (``<path>.prescreen``, ``<path>.costly``) and a
        small JSON file at ``path`` naming them."""
        path = Path(path)
        parts = {}
        for role in ("prescreen", "costly"):
            model = getattr(self, role)
            file = path.with_name(f"{path.name}.{role}")
            model.save(file)
            parts[role] = {"class": type(model).__name__, "file": file.name}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"format": FORMAT, "version": 1, "shortlist": self.shortlist,
                                   **parts}))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path, extractor=None) -> "Prescreened":
        """Read a model written by ``save`` (each part rebuilds its extractor by name)."""
        from . import GTunerModel, XGBoostModel

        classes = {c.__name__: c for c in (GTunerModel, XGBoostModel)}
        path = Path(path)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise ValueError(f"{path}: not a tensortune prescreened model ({err})") from err
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"{path}: not a tensortune prescreened model")
        parts = []
        for role in ("prescreen", "costly"):
            entry = doc[role]
            if entry["class"] not in classes:
                raise ValueError(f"{path}: unknown {role} model class {entry['class']!r}")
            parts.append(classes[entry["class"]].load(
                path.with_name(entry["file"]), extractor if role == "costly" else None))
        return cls(parts[0], parts[1], int(doc["shortlist"]))


__all__ = ["Prescreened"]
