"""``Model``: an imported network (a Relax IRModule) with the signature needed to run it."""
from __future__ import annotations

import dataclasses

import numpy as np


class ModelImportError(ValueError):
    """A model that cannot be imported (export failure, bad input shapes, ...)."""


class UnsupportedOperatorError(ModelImportError):
    """The frontend has no converter for some operator(s) of the model; ``ops`` names them."""

    def __init__(self, source: str, ops):
        self.source = source
        self.ops = tuple(sorted(set(ops)))
        super().__init__(f"{source} frontend cannot convert operator(s): {', '.join(self.ops)}")


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """Name, static shape and dtype of one model input or output."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @staticmethod
    def from_json(d: dict) -> "TensorInfo":
        return TensorInfo(str(d["name"]), tuple(int(x) for x in d["shape"]), str(d["dtype"]))


@dataclasses.dataclass(frozen=True, eq=False)
class Model:
    """A whole network as Relax: ``mod["main"]`` takes ``inputs`` (weights are constants inside
    the module) and returns ``outputs`` (one tensor or a tuple, flattened here in order)."""

    mod: object  # tvm.IRModule; typed loosely so this module imports without TVM
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    source: str  # "torch" or "onnx"
    name: str = "model"

    @staticmethod
    def from_ir(mod, source: str, name: str = "model") -> "Model":
        """Read the signature off ``mod["main"]``; refuses symbolic shapes by input name."""
        main = mod["main"]
        num_input = main.attrs.get("num_input") if main.attrs is not None else None
        params = list(main.params)[: int(num_input)] if num_input is not None else list(main.params)
        inputs = tuple(_info(p.name, p.ty) for p in params)
        ret = main.ret_ty
        fields = list(ret.fields) if hasattr(ret, "fields") else [ret]
        outputs = tuple(_info(f"output{i}", t) for i, t in enumerate(fields))
        return Model(mod, inputs, outputs, source, name)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        return random_inputs(self.inputs, seed)

    def describe(self) -> str:
        ins = ", ".join(f"{t.name}: {t.dtype}{list(t.shape)}" for t in self.inputs)
        outs = ", ".join(f"{t.dtype}{list(t.shape)}" for t in self.outputs)
        return f"{self.name} ({self.source}): ({ins}) -> ({outs})"


def random_inputs(infos, seed: int = 0) -> list[np.ndarray]:
    """Inputs for a timing run: uniform floats, zeros for integer inputs (e.g. token ids)."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, t.shape).astype(t.dtype) if t.dtype.startswith("float")
            else np.zeros(t.shape, t.dtype) for t in infos]


def _info(name: str, ty) -> TensorInfo:
    shape = getattr(ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        raise ModelImportError(f"{name}: only tensors with a known rank are supported, got {ty}")
    dims = []
    for d in shape.values:
        if not hasattr(d, "value"):
            raise ModelImportError(f"{name} has a symbolic shape {list(shape.values)}; "
                                   f"give a static shape when importing")
        dims.append(int(d.value))
    return TensorInfo(name, tuple(dims), str(ty.dtype))
