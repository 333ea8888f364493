"""``export``: a directory a user can ship, that runs with TVM's runtime and numpy alone.

    DIR/model.so        the compiled library (kernels and the VM's code; no weights)
    DIR/weights.npz     the weights ``main`` takes after the inputs, by parameter name
    DIR/check.npz       a test vector: inputs and the outputs the build machine computed
    DIR/launcher.so     the parallel launcher the kernels run their tasks on (CPU; C only)
    DIR/predict.py      the loader (``load(DIR)``, ``python predict.py IN.npz OUT.npz``)
    DIR/manifest.json   inputs, outputs, weights, target, versions, how each function was
                        scheduled and where its config came from (written last)
    DIR/cuda/           a GPU model's kernels compiled for its arch (``tasks.cuda_kernels``)
    DIR/runtime/        with ``runtime=True``: TVM's runtime trimmed to what the model needs
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..measure import launcher
from ..tasks.compiled import LIBRARY, WEIGHTS, CompiledModel, weight_info
from ..tasks.cuda_kernels import KERNELS
from .runtime import collect_runtime

FORMAT, VERSION = "tensortune.deploy", 1
MANIFEST, CHECK, LOADER = "manifest.json", "check.npz", "predict.py"
LAUNCHER = "launcher.so"
# the test vector's tolerance: a CPU export reruns the very build; a GPU one is compared with
# this CPU's build of the same model, other summation orders through every layer
CHECK_TOLERANCE = {"cpu": 1e-4, "cuda": 1e-3}


class ExportError(ValueError):
    """An export that cannot be written (the message names the problem)."""


def synthetic_recipe(weights, seed: int) -> tuple[dict, list[np.ndarray]]:
    """``(recipe, values)``: weights to be made from ``seed`` where they are loaded, each
    normal with its real counterpart's mean and deviation (so activations keep their scale)."""
    from .predict import synthetic_weights

    infos = [weight_info(w) for w in weights]
    recipe = {"seed": int(seed), "stats": [(float(np.mean(w.value)), float(np.std(w.value)))
                                           for w in weights]}
    values = synthetic_weights(infos, recipe)
    digest = hashlib.sha256()
    for v in values:
        digest.update(v.tobytes())
    recipe["sha256"] = digest.hexdigest()
    return recipe, values


def export_model(compiled: CompiledModel, out: str | os.PathLike, check_inputs: list,
                 check_outputs: list, functions: list[dict], run_id: str = "",
                 runtime: bool = False, python: str | None = None,
                 overwrite: bool = False, synthetic: dict | None = None) -> dict:
    """Write ``compiled`` to ``out`` as a deployable directory; returns its manifest.

    ``check_inputs``/``check_outputs`` are the test vector (numpy arrays in the model's input
    and output order); ``functions`` describes each fused function's schedule and provenance;
    ``runtime`` bundles TVM's runtime (for ``python``, default this interpreter's version);
    ``synthetic`` (``synthetic_recipe``) replaces the weights file by a recipe.
    """
    import tvm
    from importlib.metadata import version

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ExportError(f"{out} is not empty; choose a new directory or overwrite it")
        if not (out / MANIFEST).exists():
            raise ExportError(f"{out} is not empty and holds no export; refusing to replace it")
        shutil.rmtree(out)
    device = "cuda" if compiled.target.get("kind") == "cuda" else "cpu"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        compiled.save(tmp)
        shutil.move(Path(tmp) / LIBRARY, out / LIBRARY)
        if compiled.weights and synthetic is None:
            shutil.move(Path(tmp) / WEIGHTS, out / WEIGHTS)
        if (Path(tmp) / KERNELS).is_dir():
            shutil.move(Path(tmp) / KERNELS, out / KERNELS)
    np.savez(out / CHECK, **{f"input:{t.name}": x for t, x in zip(compiled.inputs, check_inputs)},
             **{f"output:{t.name}": y for t, y in zip(compiled.outputs, check_outputs)})
    shutil.copyfile(Path(__file__).with_name(LOADER), out / LOADER)
    shipped_launcher = _ship_launcher(out) if device == "cpu" else None
    bundled = None
    if runtime:
        bundled = collect_runtime(out / "runtime", out / LIBRARY, cuda=device == "cuda",
                                  python=python)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    manifest = {
        "format": FORMAT, "version": VERSION, "name": compiled.name, "run_id": run_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": device, "target": compiled.target,
        "tvm": tvm.__version__, "tvm_ffi": version("apache-tvm-ffi"), "python": here,
        "library": LIBRARY,
        # the parallel launcher (measure/launcher.c) compiled here; None: TVM's pool
        "launcher": shipped_launcher,
        # a GPU library's kernels, compiled here: the loader hands them to TVM's runtime
        "kernels": sorted(p.name for p in (out / KERNELS).glob("*.fatbin"))
        if (out / KERNELS).is_dir() else [],
        "inputs": [t.to_json() for t in compiled.inputs],
        "outputs": [t.to_json() for t in compiled.outputs],
        "weights": {"file": WEIGHTS if synthetic is None else None,
                    "arrays": [weight_info(w) for w in compiled.weights],
                    "bytes": sum(int(w.value.nbytes) for w in compiled.weights),
                    "sha256": (synthetic["sha256"] if synthetic else
                               _sha256(out / WEIGHTS) if compiled.weights else None),
                    "synthetic": {k: v for k, v in synthetic.items() if k != "sha256"}
                    if synthetic else None},
        "check": {"file": CHECK, "rtol": CHECK_TOLERANCE[device],
                  # relative to each output's scale, so near-zero entries do not fail it
                  "atol": CHECK_TOLERANCE[device] * max(
                      [float(np.max(np.abs(y))) for y in check_outputs if np.size(y)] + [1e-6])},
        "functions": functions,
        "default_functions": [f["name"] for f in functions if f["schedule"] == "default"],
        "runtime": bundled,
        "sizes": {},
    }
    manifest["sizes"] = sizes(out)
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, out / MANIFEST)
    return manifest


def _ship_launcher(out: Path) -> str | None:
    """Copy the compiled parallel launcher into ``out`` (the kernels run their tasks on it
    there as they do here); None where the library cannot use it or it is not compiled."""
    if not launcher.usable(out / LIBRARY):
        return None
    compiled = launcher.compiled()
    if compiled is None:
        return None
    shutil.copyfile(compiled, out / LAUNCHER)
    return LAUNCHER


def sizes(directory: Path) -> dict:
    """Bytes of the library, the weights, the runtime and the whole directory."""
    def size(path: Path) -> int:
        if path.is_file():
            return path.stat().st_size
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0

    return {"library": size(directory / LIBRARY), "weights": size(directory / WEIGHTS),
            "runtime": size(directory / "runtime"), "total": size(directory)}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(directory: str | os.PathLike) -> dict:
    """An export's manifest, checked for its format."""
    path = Path(directory) / MANIFEST
    if not path.exists():
        raise ExportError(f"{directory} holds no export ({MANIFEST} missing)")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise ExportError(f"{path} is not a tensortune export (format {manifest.get('format')!r})")
    return manifest
