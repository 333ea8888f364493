"""Run a model that tensortune exported, with TVM's runtime and numpy alone.

    python predict.py IN.npz OUT.npz       # arrays by input name in, by output name out
    python predict.py --check              # run the test vector the export holds
    python predict.py --time 50            # median latency of 50 runs on the check inputs

    from predict import load
    model = load("DIR")                    # DIR: the directory this file is in
    outputs = model(x=array)               # or model(array): {output name: array}

A ``runtime/`` folder beside this file (``tensortune export --runtime``) is used first, so the
directory runs where neither TVM nor tensortune is installed. This file is copied into every
export and imports nothing of tensortune.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FORMAT = "tensortune.deploy"


def _runtime(bundled: Path, cuda: bool):
    """``tvm`` from ``bundled`` (the export's ``runtime/``) if there is one, else the installed
    one; for a GPU model, TVM's CUDA runtime library too (a runtime-only TVM does not load it
    by itself)."""
    if bundled.is_dir() and str(bundled) not in sys.path:
        sys.path.insert(0, str(bundled))
    if cuda:
        for cudart in sorted(bundled.glob("libcudart.so*")):  # before TVM's library needs it
            ctypes.CDLL(str(cudart), mode=ctypes.RTLD_GLOBAL)
    import tvm

    if cuda:
        lib = Path(tvm.__file__).parent / "lib" / "libtvm_runtime_cuda.so"
        if lib.exists():
            ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
    return tvm


def _serve_kernels(directory: Path, names: list) -> None:
    """Answer TVM's request to compile the library's CUDA C (made when a GPU library loads)
    with the binaries compiled at export, matched by the source's digest: no compiler here."""
    import hashlib

    import tvm_ffi

    blobs = {name.split(".")[0]: directory / "cuda" / name for name in names}

    def compiled(code):
        key = hashlib.sha256(str(code).encode()).hexdigest()[:32]
        if key not in blobs:
            raise RuntimeError(f"no compiled kernels for this CUDA source ({key}) in "
                               f"{directory / 'cuda'}: export the model again")
        return bytearray(blobs[key].read_bytes())

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", compiled, override=True)


def _use_launcher(directory: Path, manifest: dict, library: Path) -> bool:
    """Point the loaded kernel library's parallel launches at the export's ``launcher.so``
    (tasks to whichever thread asks first: a core that another process keeps busy does not
    hold every kernel back); False where there is none or ``TENSORTUNE_TVM_POOL=1``."""
    name = manifest.get("launcher")
    if not name or os.environ.get("TENSORTUNE_TVM_POOL", "") not in ("", "0"):
        return False
    launcher = ctypes.CDLL(str(directory / name))
    launcher.tt_pool_init(int(os.environ["TVM_NUM_THREADS"]), 4, -1)  # once a process
    kernels = ctypes.CDLL(str(library))  # the library TVM has loaded: its pointer is set
    try:
        pointer = ctypes.c_void_p.in_dll(kernels, "__TVMBackendParallelLaunch")
    except ValueError:  # no parallel kernel
        return False
    pointer.value = ctypes.cast(launcher.tt_parallel_launch, ctypes.c_void_p).value
    return True


class Model:
    """An exported model on its device: call it with numpy arrays (by position or by input
    name); it returns ``{output name: array}``."""

    def __init__(self, directory=HERE, device: str | None = None, runtime=None):
        self.directory = Path(directory)
        self.manifest = json.loads((self.directory / "manifest.json").read_text())
        if self.manifest.get("format") != FORMAT:
            raise ValueError(f"{self.directory} holds no tensortune export")
        kind = device or self.manifest["device"]
        tvm = _runtime(Path(runtime) if runtime else self.directory / "runtime", kind == "cuda")
        if kind == "cuda":
            _serve_kernels(self.directory, self.manifest.get("kernels", []))
        from tvm.runtime import vm as relax_vm

        self.device = tvm.cuda(0) if kind == "cuda" else tvm.cpu(0)
        if not self.device.exist:
            raise RuntimeError(f"this machine has no {kind} device for {self.manifest['name']}")
        if kind == "cpu":
            os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
            # unpinned threads: a pinned one waits out any other process on its core
            os.environ.setdefault("TVM_BIND_THREADS", "0")
        library_path = self.directory / self.manifest["library"]
        library = tvm.runtime.load_module(str(library_path))
        self.launcher = kind == "cpu" and _use_launcher(self.directory, self.manifest,
                                                        library_path)
        self._vm = relax_vm.VirtualMachine(library, self.device)
        self._main = self._vm["main"]
        self._tvm = tvm
        self.inputs, self.outputs = self.manifest["inputs"], self.manifest["outputs"]
        self._weights = [tvm.runtime.tensor(w, self.device) for w in self._read_weights()]

    def _read_weights(self) -> list:
        spec = self.manifest["weights"]
        if not spec["arrays"]:
            return []
        if spec.get("synthetic"):
            return synthetic_weights(spec["arrays"], spec["synthetic"], spec["sha256"])
        with np.load(self.directory / spec["file"]) as arrays:
            out = []
            for info in spec["arrays"]:
                value = arrays[info["name"]]
                if list(value.shape) != info["shape"] or str(value.dtype) != info["dtype"]:
                    raise ValueError(f"weight {info['name']}: {value.dtype}{list(value.shape)} "
                                     f"in {spec['file']}, the library takes "
                                     f"{info['dtype']}{info['shape']}")
                out.append(value)
            return out

    def _args(self, args, kwargs) -> list:
        if args and kwargs:
            raise TypeError("give the inputs by position or by name, not both")
        if kwargs:
            unknown = set(kwargs) - {t["name"] for t in self.inputs}
            if unknown:
                raise TypeError(f"unknown input(s) {sorted(unknown)}; the model takes "
                                f"{[t['name'] for t in self.inputs]}")
            args = [kwargs[t["name"]] for t in self.inputs if t["name"] in kwargs]
        if len(args) != len(self.inputs):
            raise TypeError(f"the model takes {len(self.inputs)} input(s) "
                            f"({', '.join(t['name'] for t in self.inputs)}), got {len(args)}")
        tensors = []
        for info, value in zip(self.inputs, args):
            value = np.require(value, dtype=info["dtype"], requirements="C")  # keeps 0-d
            if list(value.shape) != info["shape"]:
                raise ValueError(f"input {info['name']}: expected shape {info['shape']}, got "
                                 f"{list(value.shape)}")
            tensors.append(self._tvm.runtime.tensor(value, self.device))
        return tensors + self._weights

    def __call__(self, *args, **kwargs) -> dict:
        result = self._main(*self._args(args, kwargs))
        flat = _flatten(result)
        return {info["name"]: value for info, value in zip(self.outputs, flat)}

    def time(self, inputs: dict, repeat: int = 20) -> float:
        """Median seconds of ``repeat`` runs (after one), the device synchronized each run."""
        args = self._args((), inputs)
        self._main(*args)
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            self._main(*args)
            self.device.sync()
            samples.append(time.perf_counter() - start)
        return float(np.median(samples))

    def check(self) -> float:
        """Run the export's test vector; returns the largest error relative to the tolerance
        (at most 1 passes) and raises ``AssertionError`` past it."""
        spec = self.manifest["check"]
        with np.load(self.directory / spec["file"]) as data:
            inputs = {t["name"]: data["input:" + t["name"]] for t in self.inputs}
            expected = {t["name"]: data["output:" + t["name"]] for t in self.outputs}
        got = self(**inputs)
        worst = 0.0
        for name, want in expected.items():
            bound = spec["atol"] + spec["rtol"] * np.abs(want)
            worst = max(worst, float(np.max(np.abs(got[name] - want) / bound)))
        if worst > 1:
            raise AssertionError(f"outputs differ from the build machine's by {worst:.1f}x the "
                                 f"tolerance (rtol {spec['rtol']}, atol {spec['atol']})")
        return worst


def synthetic_weights(arrays: list[dict], recipe: dict, sha256: str | None = None) -> list:
    """Weights made from a seed (an export for timing, whose weights did not travel): each
    normal with its real counterpart's mean and standard deviation, checked by digest."""
    import hashlib

    digest, out = hashlib.sha256(), []
    for i, (info, (mean, std)) in enumerate(zip(arrays, recipe["stats"])):
        rng = np.random.default_rng([recipe["seed"], i])
        value = rng.standard_normal(info["shape"], dtype=np.float32) * np.float32(std)
        value = (value + np.float32(mean)).astype(info["dtype"])
        digest.update(value.tobytes())
        out.append(value)
    if sha256 is not None and digest.hexdigest() != sha256:
        raise ValueError("the synthetic weights made here differ from the exporting machine's "
                         "(another numpy random stream?)")
    return out


def _flatten(value) -> list:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    out = []
    for item in value:
        out.extend(_flatten(item))
    return out


def load(directory=HERE, device: str | None = None, runtime=None) -> Model:
    """The exported model in ``directory`` on its device (``device`` overrides: cpu, cuda);
    ``runtime``: a runtime folder of ``tensortune export --runtime`` kept elsewhere."""
    return Model(directory, device, runtime)


def main(argv: list[str]) -> int:
    model = load(HERE)
    if argv[:1] == ["--check"]:
        print(f"check passed: largest error {model.check():.3f} of the tolerance")
        return 0
    if argv[:1] == ["--time"]:
        with np.load(HERE / model.manifest["check"]["file"]) as data:
            inputs = {t["name"]: data["input:" + t["name"]] for t in model.inputs}
        repeat = int(argv[1]) if len(argv) > 1 else 20
        print(f"{model.manifest['name']}: {model.time(inputs, repeat) * 1e3:.3f} ms (median of "
              f"{repeat})")
        return 0
    if len(argv) != 2:
        print("\n".join(__doc__.strip().splitlines()[2:5]), file=sys.stderr)
        return 2
    with np.load(argv[0]) as data:
        missing = [t["name"] for t in model.inputs if t["name"] not in data]
        if missing:
            print(f"{argv[0]} lacks input(s) {missing}", file=sys.stderr)
            return 2
        outputs = model(**{t["name"]: data[t["name"]] for t in model.inputs})
    np.savez(argv[1], **outputs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
