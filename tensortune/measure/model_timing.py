"""A whole saved model timed on a runner's device: a service job's model measurement.

The directory is a saved model (``CompiledModel.save``: ``model.so``, ``model.json``,
``weights.npz``) with the inputs to time it on beside it (``inputs.npz``, written by
``save_inputs``). The runner's worker loads the library on its device (an RPC server's after
uploading it), copies the weights and inputs there and times ``main`` with the device's own
``time_evaluator`` through the VM's stateful API (a function returning a tuple cannot be timed
over RPC otherwise). Weights and inputs go in the order ``model.json`` gives.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from . import launcher

LIBRARY, METADATA, WEIGHTS, INPUTS = "model.so", "model.json", "weights.npz", "inputs.npz"


@runtime_checkable
class ModelTimer(Protocol):
    """A device's runner that can also time a whole saved model (``LocalRunner``,
    ``RPCRunner``, a Ray device's)."""

    def time_model(self, directory: str, repeat: int, min_repeat_ms: int) -> tuple[float, ...]:
        """Seconds per run of the model saved in ``directory``, one per repeat."""
        ...


def save_inputs(directory: str | os.PathLike, arrays) -> None:
    """``inputs.npz`` beside a saved model, in the order of its inputs."""
    path = Path(directory) / INPUTS
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, *arrays)
    os.replace(tmp, path)


def model_arrays(directory: str | os.PathLike) -> list[np.ndarray]:
    """The saved model's ``main`` arguments: its inputs, then its weights."""
    path = Path(directory)
    meta = json.loads((path / METADATA).read_text())
    with np.load(path / INPUTS) as saved:
        arrays = [saved[f"arr_{i}"] for i in range(len(meta["inputs"]))]
    if meta.get("weights"):
        with np.load(path / WEIGHTS) as saved:
            arrays += [saved[w["name"]] for w in meta["weights"]]
    return arrays


def time_main(library, dev, arrays, repeat: int, min_repeat_ms: int) -> tuple[float, ...]:
    """Time the VM of ``library`` (a module loaded where ``dev`` is) on ``arrays``."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(library, dev)
    vm.set_input("main", *[tvm.runtime.tensor(a, dev) for a in arrays])
    vm.invoke_stateful("main")  # warm-up: first-touch page faults, the thread pool
    timer = vm.time_evaluator("invoke_stateful", dev, number=1, repeat=repeat,
                              min_repeat_ms=min_repeat_ms)
    return tuple(float(c) for c in timer("main").results)


def time_here(job: dict) -> tuple[float, ...]:
    """Worker side of ``LocalRunner.time_model``: the model timed on this process's CPU."""
    import tvm

    path = str(Path(job["directory"]) / LIBRARY)
    library = tvm.runtime.load_module(path)
    launcher.install(path)  # as CompiledModel runs it
    return time_main(library, tvm.cpu(), model_arrays(job["directory"]), job["repeat"],
                     job["min_repeat_ms"])
