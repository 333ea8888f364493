"""A compiled model on the CPU: run it on numpy inputs, time it, save and load it."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import statistics
from pathlib import Path

import numpy as np

from ..frontend import TensorInfo
from ..frontend.model import random_inputs
from ..measure import launcher, use_threads
# a saved model's files (WEIGHTS: the lifted constants, ``tasks.weights``, by parameter name),
# which the device runners read too
from ..measure.model_timing import LIBRARY, METADATA, WEIGHTS


@dataclasses.dataclass(frozen=True)
class TimingStats:
    """Seconds per model run, one entry per repeat."""

    costs: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.costs)

    @property
    def median(self) -> float:
        return statistics.median(self.costs)

    @property
    def min(self) -> float:
        return min(self.costs)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.costs)

    def to_json(self) -> dict:
        return {"costs": list(self.costs), "mean": self.mean, "median": self.median,
                "min": self.min, "std": self.std}


class CompiledModel:
    """A compiled model on the CPU: ``run`` numpy inputs, ``time`` it, ``save``/``load`` it.

    ``tuned`` names the fused functions that use a tuned schedule; ``functions`` describes
    every fused function (``compile.function_table``: task, FLOPs, calls) for profiles;
    ``weights`` are the values ``main`` takes after the inputs (``tasks.weights``), uploaded to
    the device once.
    """

    def __init__(self, library, inputs: tuple[TensorInfo, ...], outputs: tuple[TensorInfo, ...],
                 tuned: tuple[str, ...] = (), name: str = "model", target: dict | None = None,
                 library_path: str | None = None, functions: dict | None = None,
                 weights: tuple = ()):
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        self.weights = tuple(weights)
        self.tuned, self.name = tuple(tuned), name
        self.target = dict(target or {})
        self.functions = dict(functions or {})
        self._library = library  # None until first use when loaded from library_path
        self._library_path = library_path
        self._kernels = None  # a GPU model's compiled kernels (``cuda_kernels.precompile``)
        self._runtime = None  # (device, VM, its main, input tensors): made on first use

    def default_functions(self) -> list[str]:
        """The fused functions built with TVM's unscheduled default (``compile.function_table``:
        no config, no seed, no fallback; views and dlight-scheduled GPU functions excluded)."""
        from .compile import default_functions

        return default_functions(self.functions)

    def _ready(self):
        """The VM on the target's device, made once; a module for a device this machine lacks
        (a CUDA build on a CPU host) can be saved but not run."""
        if self._runtime is None:
            import tvm
            from tvm import relax

            kind = self.target.get("kind", "llvm")
            dev = tvm.cuda() if kind == "cuda" else tvm.cpu()
            if not dev.exist:
                raise RuntimeError(f"{self.name} is compiled for {kind} "
                                   f"({self.target.get('arch', '')}); this machine has no such "
                                   "device: copy the saved module to one that has")
            if self._library is None:  # loaded lazily: a GPU library loads only beside a GPU
                self._library = tvm.runtime.load_module(self._library_path)
                if kind == "llvm":  # its tasks to whichever thread asks first
                    launcher.install(self._library_path)
            vm = relax.VirtualMachine(self._library, dev)
            # one aligned input tensor per input, refilled on every call: a fresh tensor per
            # call costs an allocation and the page faults of first touch (not thread-safe)
            inputs = [tvm.runtime.empty(t.shape, t.dtype, dev) for t in self.inputs]
            weights = [tvm.runtime.tensor(w.value, dev) for w in self.weights]
            self._runtime = (dev, vm, vm["main"], inputs, weights)
        return self._runtime

    @property
    def _vm(self):
        return self._ready()[1]

    def _args(self, arrays):
        if len(arrays) != len(self.inputs):
            raise ValueError(f"{self.name} takes {len(self.inputs)} input(s) "
                             f"({', '.join(t.name for t in self.inputs)}), got {len(arrays)}")
        args = []
        for info, x, tensor in zip(self.inputs, arrays, self._ready()[3]):
            x = np.asarray(x)
            if tuple(x.shape) != info.shape:
                raise ValueError(f"input {info.name}: expected shape {info.shape}, "
                                 f"got {tuple(x.shape)}")
            if x.dtype != np.dtype(info.dtype):
                if not np.can_cast(x.dtype, info.dtype, "same_kind"):
                    raise ValueError(f"input {info.name}: expected {info.dtype}, got {x.dtype}")
                x = x.astype(info.dtype)
            tensor.copyfrom(np.require(x, requirements="C"))
            args.append(tensor)
        return args + self._runtime[4]

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """The model's outputs, flattened in order, for numpy inputs of the imported shapes."""
        args = self._args(inputs)
        return _flatten(self._runtime[2](*args))

    def time(self, repeat: int = 10, number: int = 1, min_repeat_ms: int = 0,
             inputs: list[np.ndarray] | None = None, seed: int = 0) -> TimingStats:
        """Time ``repeat`` batches of ``number`` runs (after one warm-up) on the given inputs,
        or on random ones."""
        if inputs is None:
            inputs = random_inputs(self.inputs, seed)
        args = self._args(inputs)
        dev, vm = self._runtime[:2]
        timer = vm.time_evaluator("main", dev, number=number, repeat=repeat,
                                  min_repeat_ms=min_repeat_ms)
        return TimingStats(tuple(float(c) for c in timer(*args).results))

    def with_weights(self, values) -> "CompiledModel":
        """The same library with other weights (arrays in ``weights`` order, same shapes)."""
        from .weights import Weight

        values = list(values)
        if len(values) != len(self.weights):
            raise ValueError(f"{self.name} takes {len(self.weights)} weights, got {len(values)}")
        new = []
        for w, v in zip(self.weights, values):
            v = np.asarray(v)
            if v.shape != w.value.shape or v.dtype != w.value.dtype:
                raise ValueError(f"weight {w.name}: expected {w.value.dtype}{list(w.value.shape)},"
                                 f" got {v.dtype}{list(v.shape)}")
            new.append(Weight(w.name, v))
        other = CompiledModel(self._library, self.inputs, self.outputs, self.tuned, self.name,
                              self.target, self._library_path, self.functions, tuple(new))
        other._kernels = self._kernels
        return other

    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``model.so``, ``weights.npz`` and ``model.json`` (signature, weights, target,
        tuned functions) to ``directory``; returns the directory."""
        import tvm

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        if self._library_path is not None:
            if Path(self._library_path).resolve() != (out / LIBRARY).resolve():
                shutil.copyfile(self._library_path, out / LIBRARY)
        else:
            with _without_native_lines("Scope Saving:"):
                self._library.export_library(str(out / LIBRARY))
        if self.target.get("kind") == "cuda":
            self._save_kernels(out)
        if self.weights:
            save_weights(out / WEIGHTS, self.weights)
        meta = {"name": self.name, "inputs": [t.to_json() for t in self.inputs],
                "outputs": [t.to_json() for t in self.outputs],
                "weights": [weight_info(w) for w in self.weights], "tuned": list(self.tuned),
                "target": self.target, "tvm": tvm.__version__, "functions": self.functions}
        (out / METADATA).write_text(json.dumps(meta, indent=1) + "\n")
        return out

    def _save_kernels(self, out: Path) -> None:
        """A GPU model's kernels, compiled once (``cuda_kernels``), beside its library."""
        from .cuda_kernels import KERNELS, precompile, save_kernels

        if self._library is None:  # a loaded model: its kernels are beside its library
            src = Path(self._library_path).parent / KERNELS
            if src.is_dir() and src.resolve() != (out / KERNELS).resolve():
                shutil.copytree(src, out / KERNELS, dirs_exist_ok=True)
            return
        if self._kernels is None:
            self._kernels = precompile(self._library, self.target)
        save_kernels(out, self._kernels)

    @staticmethod
    def load(directory: str | os.PathLike, threads: int | None = None) -> "CompiledModel":
        """A model saved by ``save`` (on a machine of the same CPU kind); its library is
        loaded when it first runs."""
        path = Path(directory)
        if not (path / LIBRARY).exists() or not (path / METADATA).exists():
            raise FileNotFoundError(f"{path} has no saved model ({LIBRARY} and {METADATA})")
        use_threads(threads or os.cpu_count() or 1)
        meta = json.loads((path / METADATA).read_text())
        # a model saved before the weights were lifted has them inside its library
        weights = load_weights(path / WEIGHTS, meta["weights"]) if meta.get("weights") else ()
        return CompiledModel(None, tuple(TensorInfo.from_json(t) for t in meta["inputs"]),
                             tuple(TensorInfo.from_json(t) for t in meta["outputs"]),
                             tuple(meta.get("tuned", ())), meta.get("name", "model"),
                             meta.get("target"), str(path / LIBRARY), meta.get("functions"),
                             weights)


def weight_info(weight) -> dict:
    """A weight's entry in ``model.json``: name, shape, dtype."""
    return {"name": weight.name, "shape": list(weight.value.shape),
            "dtype": str(weight.value.dtype)}


def save_weights(path: Path, weights) -> None:
    """``weights.npz``: one array per weight, by parameter name (written whole, then renamed,
    so a killed save never leaves a short file that loads)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **{w.name: w.value for w in weights})
    os.replace(tmp, path)


def load_weights(path: Path, infos: list[dict]) -> tuple:
    """The weights ``model.json`` lists, read from ``weights.npz`` and checked against it."""
    from .weights import Weight

    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the model takes {len(infos)} weights")
    out = []
    with np.load(path) as arrays:
        for info in infos:
            if info["name"] not in arrays:
                raise ValueError(f"{path} has no weight {info['name']!r}")
            value = arrays[info["name"]]
            if list(value.shape) != list(info["shape"]) or str(value.dtype) != info["dtype"]:
                raise ValueError(f"{path}: weight {info['name']} is {value.dtype}"
                                 f"{list(value.shape)}, the library takes {info['dtype']}"
                                 f"{info['shape']}")
            out.append(Weight(info["name"], value))
    return tuple(out)


@contextlib.contextmanager
def _without_native_lines(noise: str):
    """Drop one known debug line that TVM 0.27's VM prints (to the C++ stderr, once per memory
    scope) on every export; anything else it prints is passed through afterwards."""
    import sys
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            for line in sink.read().decode(errors="replace").splitlines(keepends=True):
                if noise not in line:
                    sys.stderr.write(line)


def _flatten(value) -> list[np.ndarray]:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    out = []
    for item in value:
        out.extend(_flatten(item))
    return out
