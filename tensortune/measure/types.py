"""What flows through measurement: inputs, build results, measure results, error kinds."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..space import Config
from ..workload import Task


class ErrorKind(str, enum.Enum):
    NONE = "none"
    INVALID_CONFIG = "invalid_config"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    WRONG_RESULT = "wrong_result"
    DEVICE_ERROR = "device_error"  # a remote device's session broke while running it, twice


@dataclass(frozen=True)
class MeasureInput:
    """One candidate: a task and a config of its space."""

    task: Task
    config: Config


@dataclass(frozen=True)
class BuildResult:
    """A compiled candidate (``path`` to a shared library) or the error that prevented it.

    ``prepack`` (a ``measure.prepack.Prepack`` as JSON) says the library also holds a
    ``prepack`` function to run once on its constant weights before ``main`` is timed.
    ``message`` is an error's first line, ``detail`` its full text (the traceback).
    """

    path: str | None
    build_s: float
    error: ErrorKind = ErrorKind.NONE
    message: str = ""
    prepack: dict | None = None
    detail: str = field(default="", repr=False)
    node: str = ""  # the cluster node that built it ("": this machine)


@dataclass(frozen=True)
class MeasureResult:
    """Timings in seconds (one per repeat) or an error; ``verified`` if checked against numpy;
    ``device`` names where it ran (empty: this machine). ``message`` is an error's first line,
    which records keep; ``detail`` its full text (a traceback), which goes to ``errors.log``
    only and does not make two results unequal."""

    costs: tuple[float, ...]
    error: ErrorKind = ErrorKind.NONE
    message: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    verified: bool = False
    timestamp: float = field(default=0.0)
    device: str = ""
    detail: str = field(default="", repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is ErrorKind.NONE and bool(self.costs)

    @property
    def mean(self) -> float:
        """Mean of the repeats in seconds; infinity for errors."""
        return sum(self.costs) / len(self.costs) if self.ok else float("inf")

    @property
    def cost(self) -> float:
        """The cost that ranks candidates: the median repeat in seconds (one repeat slowed by a
        noisy neighbour does not move it); infinity for errors, so sorting puts them last."""
        if not self.ok:
            return float("inf")
        ordered = sorted(self.costs)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
