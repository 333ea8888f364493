"""The ``Workload`` contract: a frozen, serializable description of one tensor operator."""
from __future__ import annotations

import abc

import dataclasses
import hashlib
import json
from typing import ClassVar

import numpy as np


class WorkloadError(ValueError):
    """A workload description that cannot be built (bad shape, unknown operator, ...)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload(abc.ABC):
    """Base of every operator description.

    Subclasses are frozen dataclasses of plain ints/bools/strs; they define ``op``,
    ``build_te()`` (input and output TE tensors), ``flops`` and ``reference(*inputs)``.
    """

    op: ClassVar[str] = ""
    dtype: str = "float32"

    # -- identity -----------------------------------------------------------------------------
    def params(self) -> dict:
        return dataclasses.asdict(self)

    def to_dict(self) -> dict:
        return {"op": self.op, **self.params()}

    @property
    def key(self) -> str:
        """Stable identity: operator name plus every parameter, e.g. ``matmul-1a2b3c4d5e``."""
        blob = json.dumps(self.to_dict(), sort_keys=True)
        return f"{self.op}-{hashlib.sha1(blob.encode()).hexdigest()[:10]}"

    def to_job(self) -> dict:
        """What a worker process is sent: ``to_dict()`` (a fused function adds its TIR)."""
        return self.to_dict()

    @property
    def param_names(self) -> tuple[str, ...]:
        """The function's buffer names where knobs are named after them (a fused function's
        ``lv15``); empty for an operator, whose knobs name its axes only."""
        return ()

    @property
    def outputs(self) -> int:
        """How many of the function's last parameters are outputs."""
        return 1

    @property
    def constant_inputs(self) -> tuple[int, ...]:
        """Positions of the inputs that are a model's constant weights; none for an operator,
        whose inputs are all the caller's."""
        return ()

    def describe(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in self.params().items() if k != "dtype")
        return f"{self.op}({inner})"

    # -- definition ---------------------------------------------------------------------------
    def build_te(self) -> list:
        """Input and output TE tensors; operators without a TE definition override prim_func."""
        raise WorkloadError(f"{self.op} has no tensor-expression definition")

    def prim_func(self):
        """The TIR function (inputs..., output) that templates schedule."""
        from tvm import te

        return te.create_prim_func(self.build_te())

    @property
    @abc.abstractmethod
    def flops(self) -> int:
        """Floating-point operations of one call."""

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        return [tuple(int(d) for d in t.shape) for t in self.build_te()[:-1]]

    @property
    def output_shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.build_te()[-1].shape)

    @property
    def input_dtypes(self) -> list[str]:
        return [self.dtype] * len(self.input_shapes)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.uniform(-1, 1, s).astype(self.dtype) for s in self.input_shapes]

    @abc.abstractmethod
    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        """The expected output for ``inputs``, computed independently of TVM's schedules."""


def positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise WorkloadError(f"{name} must be a positive integer, got {value!r}")
