"""``EnsembleModel``: several cost models voting, each on its own standardized scale.

Members of different families make different mistakes. On the held-out tasks of the committed
dataset (zero-shot, ``itervar+hardware+roofline``, mean of three seeds) XGBoost regression
alone scores Pearson 0.888 and top-10 0.904; averaged with GTuner, 0.888 and 0.915: the same
correlation, better picks at the top. That gain did not carry over to tuning: pretrained on
``itervar`` it tuned conv2d_C7 worse than GTuner alone (docs/cost-models.md, "What did not help").

Member scores live on unrelated scales (XGBoost predicts scaled throughput, GTuner is trained
with a ranking loss), so each is standardized before averaging. The mean and the within-task
spread come from the member's own predictions on the measurements it was last trained on, not
from the batch being scored: a candidate's score must not depend on which other candidates
share its batch (annealing scores one move at a time).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..measure.types import MeasureInput, MeasureResult
from .base import CostModel, ModelSpec, as_cost_model, read_parts, write_parts

FORMAT = "tensortune.ensemble"


class EnsembleModel(CostModel):
    """The weighted mean of ``members``' standardized scores (see the module docstring)."""

    def __init__(self, members: Sequence, weights: Sequence[float] | None = None):
        if not members:
            raise ValueError("an ensemble needs at least one member model")
        weights = [1.0] * len(members) if weights is None else [float(w) for w in weights]
        if len(weights) != len(members):
            raise ValueError(f"{len(members)} members but {len(weights)} weights")
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"weights must be >= 0 and not all 0, got {weights}")
        self.members: list[CostModel] = [as_cost_model(m) for m in members]
        self.weights = weights
        self._scale = [(0.0, 0.0)] * len(members)  # (mean, std) per member; std 0: no opinion

    @property
    def trained(self) -> bool:
        return all(m.trained for m in self.members)

    @property
    def extractor(self):
        return self.members[0].extractor

    @property
    def compiles(self) -> bool:
        return any(m.compiles for m in self.members)

    def close(self) -> None:
        for member in self.members:
            member.close()

    def pretrain(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Pretrain every member on history (other tasks, earlier runs)."""
        for member in self.members:
            member.pretrain(inputs, results)
        self._rescale(inputs)

    def fit(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        for member in self.members:
            member.fit(inputs, results)
        self._rescale(inputs)

    def _rescale(self, inputs: Sequence[MeasureInput]) -> None:
        if len(inputs) < 2:
            return
        groups: dict = {}
        for k, inp in enumerate(inputs):
            groups.setdefault(inp.task, []).append(k)
        scale = []
        for member, old in zip(self.members, self._scale):
            p = np.asarray(member.predict(inputs), dtype=float)
            # candidates are only ever compared within a task, so the spread that matters is
            # the within-task one; across tasks a model's scores may differ by large offsets
            var = np.mean([p[idx].var() for idx in groups.values()])
            scale.append((float(p.mean()), float(np.sqrt(var))) if var > 0 else old)
        self._scale = scale

    def predict(self, inputs: Sequence[MeasureInput]) -> np.ndarray:
        """Weighted mean of the members' standardized scores; a member with no opinion yet
        (constant scores) is left out."""
        total, weight = np.zeros(len(inputs)), 0.0
        for member, w, (mean, std) in zip(self.members, self.weights, self._scale):
            if std > 0 and w > 0:
                total += w * (np.asarray(member.predict(inputs), dtype=float) - mean) / std
                weight += w
        return total / weight if weight else total

    def save(self, path: str | Path) -> None:
        """Write each member beside ``path`` (``<path>.0``, ``<path>.1``, ...) and a small JSON
        file at ``path`` naming them, with the weights and scales."""
        write_parts(Path(path), {str(k): m for k, m in enumerate(self.members)},
                    {"format": FORMAT, "version": 1, "weights": self.weights,
                     "scale": self._scale})

    @classmethod
    def load(cls, path: str | Path, extractor=None) -> "EnsembleModel":
        """Read a model written by ``save``; members rebuild their extractors by name unless
        ``extractor`` is given."""
        doc, parts = read_parts(Path(path), FORMAT, "ensemble", {}, default=extractor)
        model = cls([parts[str(k)] for k in range(len(parts))], doc["weights"])
        model._scale = [tuple(s) for s in doc["scale"]]
        return model


def default_ensemble(extractor, seed: int = 0, label: str = "absolute") -> EnsembleModel:
    """XGBoost regression and GTuner on one extractor, both on ``label`` throughput labels."""
    from . import GTunerModel, XGBoostModel

    return EnsembleModel([XGBoostModel(extractor, objective="reg", seed=seed, label=label),
                          GTunerModel(extractor, seed=seed, label=label)])


SPEC = ModelSpec("ensemble", "XGBoost and GTuner voting", default_ensemble)

__all__ = ["EnsembleModel", "default_ensemble"]
