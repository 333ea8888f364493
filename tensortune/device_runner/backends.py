"""Where kernels run: CuPy on a real GPU, or a fake for tests and dry runs."""
from __future__ import annotations

import json
import os
import time
import zlib
from typing import Any, Protocol, Sequence

import numpy as np

from .batch import KernelSpec

# CUDA's default limit; above it a kernel must opt in to dynamic shared memory
_DEFAULT_SHARED = 48 * 1024


class Backend(Protocol):
    """What the runner needs from a device. Device arrays are opaque to the runner."""

    #: whether ``time`` replays a captured CUDA graph (named in each result's message)
    graphs: bool

    def device_name(self) -> str: ...

    def arch(self) -> str: ...

    def load(self, module_path: str, kernel_names: Sequence[str]) -> Any: ...

    def upload(self, array: np.ndarray) -> Any: ...

    def zeros(self, shape: Sequence[int], dtype: np.dtype) -> Any: ...

    def download(self, array: Any) -> np.ndarray: ...

    def expect(self, ref: np.ndarray, stride: int = 1, out_index: int = -1) -> None:
        """The next candidate's reference output, every ``stride``-th element of the flat
        output, ``buffers[out_index]`` of its launches (only the fake uses it)."""

    def launch(self, handle: Any, kernels: Sequence[KernelSpec], buffers: Sequence[Any]) -> None:
        """Launch all kernels of a candidate once, in order (asynchronously)."""

    def time(self, handle: Any, kernels: Sequence[KernelSpec], buffers: Sequence[Any],
             number: int) -> float:
        """Seconds per call, averaged over ``number`` back-to-back calls."""

    def synchronize(self) -> None: ...


class CupyBackend:
    """Kernels from cubin files through CuPy, timed with CUDA events."""

    def __init__(self, device_id: int = 0) -> None:
        import cupy  # lazily: hosts without a GPU never install it

        self._cp = cupy
        self._device = cupy.cuda.Device(device_id)
        self._device.use()
        self._props = cupy.cuda.runtime.getDeviceProperties(device_id)
        self._stream = cupy.cuda.Stream(non_blocking=True)
        self.graphs = True  # time through CUDA graphs while the driver allows capture

    def device_name(self) -> str:
        name = self._props["name"]
        return name.decode(errors="replace") if isinstance(name, bytes) else str(name)

    def arch(self) -> str:
        return f"sm_{self._props['major']}{self._props['minor']}"

    def load(self, module_path: str, kernel_names: Sequence[str]) -> Any:
        module = self._cp.RawModule(path=str(module_path))
        # get_function loads the module now, so a bad cubin fails here and not mid-timing
        functions = {name: module.get_function(name) for name in dict.fromkeys(kernel_names)}
        return module, functions, {}

    def upload(self, array: np.ndarray) -> Any:
        # kernels index raw pointers, so the device copy must be C-contiguous
        return self._cp.asarray(np.require(array, requirements="C"))

    def zeros(self, shape: Sequence[int], dtype: np.dtype) -> Any:
        return self._cp.zeros(tuple(shape), dtype=dtype)

    def download(self, array: Any) -> np.ndarray:
        return self._cp.asnumpy(array)

    def expect(self, ref: np.ndarray, stride: int = 1, out_index: int = -1) -> None:
        pass

    def launch(self, handle: Any, kernels: Sequence[KernelSpec], buffers: Sequence[Any]) -> None:
        _, functions, opted_in = handle
        for k in kernels:
            fn = functions[k.name]
            if k.shared_bytes > max(_DEFAULT_SHARED, opted_in.get(k.name, 0)):
                fn.max_dynamic_shared_size_bytes = k.shared_bytes
                opted_in[k.name] = k.shared_bytes
            fn(k.grid, k.block, tuple(buffers[i] for i in k.args), shared_mem=k.shared_bytes)

    def time(self, handle: Any, kernels: Sequence[KernelSpec], buffers: Sequence[Any],
             number: int) -> float:
        # The ``number`` calls are captured into a CUDA graph and replayed: launched one by one
        # from Python, a kernel of a few microseconds waits for its launch (5 us or more) and
        # the events would time CPU overhead. Without graphs (a driver that refuses capture)
        # the calls are launched directly.
        cp = self._cp
        graph = self._capture(handle, kernels, buffers, number) if self.graphs else None
        start, end = cp.cuda.Event(), cp.cuda.Event()
        with self._stream:
            if graph is not None:
                graph.launch(self._stream)  # the first replay uploads the graph
            start.record(self._stream)
            if graph is not None:
                graph.launch(self._stream)
            else:
                for _ in range(number):
                    self.launch(handle, kernels, buffers)
            end.record(self._stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / 1e3 / number

    def _capture(self, handle, kernels, buffers, number):
        stream = self._stream
        try:
            with stream:
                stream.begin_capture()
                try:
                    for _ in range(number):
                        self.launch(handle, kernels, buffers)
                finally:
                    graph = stream.end_capture()
            return graph
        except Exception:  # noqa: BLE001 - capture unsupported here: time plain launches
            self.graphs = False
            return None

    def synchronize(self) -> None:
        self._device.synchronize()


class FakeBackend:
    """A device without a GPU: a "module" is JSON ``{"behaviour": ..., "us": ...}``.

    A real cubin counts as ``ok`` at a time its bytes fix (5-105 us).
    Behaviours: ok (writes the reference), wrong (writes ones), crash (the process
    exits like a sticky CUDA error would kill it), hang, launch_error (raises).
    The timer returns ``us`` microseconds per call without sleeping.
    """

    BEHAVIOURS = ("ok", "wrong", "crash", "hang", "launch_error")
    graphs = False

    def __init__(self) -> None:
        self._ref: np.ndarray | None = None
        self._stride, self._out = 1, -1

    def device_name(self) -> str:
        return "Fake GPU"

    def arch(self) -> str:
        return "fake"

    def load(self, module_path: str, kernel_names: Sequence[str]) -> Any:
        with open(module_path, "rb") as f:
            blob = f.read()
        if blob[:4] == b"\x7fELF":
            # a real cubin (tests of the tuner end to end): computes the reference, in a time
            # that is a fixed function of its code, so a search has something to rank
            return {"behaviour": "ok", "us": 5.0 + zlib.crc32(blob) % 1000 / 10.0}
        spec = json.loads(blob)
        if not isinstance(spec, dict) or spec.get("behaviour") not in self.BEHAVIOURS:
            raise ValueError(f"fake module {module_path}: behaviour must be one of {self.BEHAVIOURS}")
        return {"behaviour": spec["behaviour"], "us": float(spec.get("us", 10.0))}

    def upload(self, array: np.ndarray) -> Any:
        return np.array(array, copy=True)

    def zeros(self, shape: Sequence[int], dtype: np.dtype) -> Any:
        return np.zeros(tuple(shape), dtype=dtype)

    def download(self, array: Any) -> np.ndarray:
        return np.array(array, copy=True)

    def expect(self, ref: np.ndarray, stride: int = 1, out_index: int = -1) -> None:
        self._ref, self._stride, self._out = ref, stride, out_index

    def launch(self, handle: Any, kernels: Sequence[KernelSpec], buffers: Sequence[Any]) -> None:
        behaviour, out = handle["behaviour"], buffers[self._out]  # scratch buffers follow it
        if behaviour == "crash":
            os._exit(3)
        if behaviour == "hang":
            while True:
                time.sleep(3600)
        if behaviour == "launch_error":
            raise RuntimeError("fake launch error: CUDA_ERROR_LAUNCH_FAILED\n(second line)")
        if behaviour == "ok" and self._ref is not None:
            # a sampled reference fixes only its elements; the rest stays as it was
            out.reshape(-1)[::self._stride] = self._ref.reshape(-1)
        else:
            out[...] = np.zeros_like(out) + 1

    def time(self, handle: Any, kernels: Sequence[KernelSpec], buffers: Sequence[Any],
             number: int) -> float:
        self.launch(handle, kernels, buffers)
        return handle["us"] * 1e-6

    def synchronize(self) -> None:
        pass


BACKENDS = ("cupy", "fake")


def make_backend(name: str) -> Backend:
    """A backend by name; ``cupy`` imports CuPy (and creates a CUDA context) only now."""
    if name == "cupy":
        return CupyBackend()
    if name == "fake":
        return FakeBackend()
    raise ValueError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")
