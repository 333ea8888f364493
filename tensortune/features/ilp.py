"""The ``ilp`` feature extractor: Tuna's list-scheduled cycles (``list_schedule``) of each
candidate's assembly, compiled once with the ``hardware`` extractor's."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..analysis.list_schedule import FEATURE_NAMES
from ..measure.types import MeasureInput
from .base import FeatureExtractor
from .hardware_cpu import HardwareCPUFeatures


class IlpFeatures(FeatureExtractor):
    """Tuna's list-scheduled cycles of each candidate's assembly (``FEATURE_NAMES``).

    The assembly is the ``hardware`` extractor's: it is asked to schedule it too
    (``with_ilp``), so a candidate compiled for both feature sets is compiled once; a feature
    store's wrapper of it lends the extractor it wraps (its stored rows hold no assembly).
    """

    name = "ilp"
    source = "hardware"  # the extractor this one derives from; make_extractor shares it

    def __init__(self, hardware=None):
        if hardware is None:
            hardware = HardwareCPUFeatures()
        if not isinstance(hardware, FeatureExtractor) or hardware.name != self.source:
            raise ValueError(f"ilp derives from the {self.source!r} extractor, "
                             f"not {hardware!r}")
        self.hardware = hardware
        self._compiler = hardware.computing().with_ilp()

    @property
    def dim(self) -> int:
        return len(FEATURE_NAMES)

    def extract(self, inputs: Sequence[MeasureInput]) -> np.ndarray:
        return self._compiler.ilp_rows(inputs)

    def close(self) -> None:
        self.hardware.close()


__all__ = ["IlpFeatures"]
