"""``Prescreened``: a costly cost model searched through a cheap one.

Models on ``hardware`` features compile every candidate they score (a fraction of a second
each), so an annealing run that scores thousands of moves per batch is out of reach for them.
Wrapped here, the search walks the space on the cheap model's scores (e.g. XGBoost on
``itervar``), keeps its ``shortlist`` x batch best distinct configs, and the costly model picks
the batch among those: a few hundred compilations per batch instead of thousands, with the
costly model still deciding what gets measured. Both models learn from every measurement.

``prescreen`` and ``shortlist`` are declared by every ``CostModel`` (None and 1 for a plain
one): the search reads them; everything else sees an ordinary cost model whose ``predict``,
``extractor``, ``trained`` and ``label_scale`` are the costly one's.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..measure.types import MeasureInput, MeasureResult
from .base import CostModel, as_cost_model, read_parts, write_parts

FORMAT = "tensortune.prescreened"


class Prescreened(CostModel):
    """``costly`` choosing among the configs ``prescreen`` rates best (see the module docstring)."""

    def __init__(self, prescreen, costly, shortlist: int = 4):
        if shortlist < 1:
            raise ValueError(f"shortlist must be at least 1, got {shortlist}")
        self.prescreen: CostModel = as_cost_model(prescreen)
        # one object in both roles stays one (hardware-free tuning then searches and ranks once)
        self._costly: CostModel = (self.prescreen if costly is prescreen
                                   else as_cost_model(costly))
        self.shortlist = shortlist

    @property
    def costly(self) -> CostModel:
        return self._costly

    @property
    def trained(self) -> bool:
        return self.costly.trained

    @property
    def extractor(self):
        return self.costly.extractor

    @property
    def label_scale(self) -> float | None:
        return self.costly.label_scale

    @property
    def compiles(self) -> bool:
        return self.costly.compiles

    def close(self) -> None:
        self.prescreen.close()
        self.costly.close()

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
        write_parts(Path(path), {"prescreen": self.prescreen, "costly": self.costly},
                    {"format": FORMAT, "version": 2, "shortlist": self.shortlist})

    @classmethod
    def load(cls, path: str | Path, extractor=None) -> "Prescreened":
        """Read a model written by ``save`` (the cheap part rebuilds its extractor by name)."""
        doc, parts = read_parts(Path(path), FORMAT, "prescreened", {"costly": extractor})
        return cls(parts["prescreen"], parts["costly"], int(doc["shortlist"]))


__all__ = ["Prescreened"]
