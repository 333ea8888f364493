"""TVM's runtime, trimmed to what loading and running an exported model need.

The installed ``tvm`` package is 305 MB, 259 MB of it the compiler library. ``collect_runtime``
finds what an export needs by running it: a child Python imports ``tvm`` from a view of the
package without the compiler (TVM then runs runtime-only), loads the model's library and makes
its VM; the Python modules it imported and the shared libraries it mapped are copied, with
``tvm_ffi`` and ``typing_extensions`` (what ``tvm_ffi`` needs besides numpy). For a GPU model,
TVM's CUDA runtime library and the CUDA runtime it links (``libcudart``) are added. For a
Python of another version than this one, the matching ``tvm_ffi`` wheel is fetched with pip.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

COMPILER = "libtvm_compiler.so"
_PROBE = r"""
import json, sys
import tvm
from tvm.runtime import vm as relax_vm
path, cuda = sys.argv[1], sys.argv[2] == "1"
if not cuda:  # a GPU library needs the GPU's driver to load; its imports are the same
    relax_vm.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())
files = sorted({m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)})
libs = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
print(json.dumps({"files": files, "libs": libs}))
"""


class RuntimeBundleError(RuntimeError):
    """The runtime could not be collected (the message says which step failed)."""


def _packages() -> dict[str, Path]:
    import tvm
    import tvm_ffi
    import typing_extensions

    return {"tvm": Path(tvm.__file__).parent, "tvm_ffi": Path(tvm_ffi.__file__).parent,
            "typing_extensions.py": Path(typing_extensions.__file__)}


def _runtime_only_view(root: Path, packages: dict[str, Path]) -> None:
    """``root/tvm`` etc. as symbolic links to the installed files, less the compiler."""
    for name, src in packages.items():
        if src.is_file():
            (root / name).symlink_to(src)
            continue
        for dirpath, dirnames, filenames in os.walk(src):
            rel = Path(dirpath).relative_to(src)
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            (root / name / rel).mkdir(parents=True, exist_ok=True)
            for f in filenames:
                if f != COMPILER:
                    (root / name / rel / f).symlink_to(Path(dirpath) / f)


def _probe(view: Path, library: Path, cuda: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    import numpy

    # -S: no site-packages; the view comes first, numpy's folder (which holds the full
    # installation too) after it, so the view's tvm is the one imported
    env["PYTHONPATH"] = os.pathsep.join([str(view), str(Path(numpy.__file__).parent.parent)])
    proc = subprocess.run([sys.executable, "-S", "-c", _PROBE, str(library), "1" if cuda else "0"],
                          env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:]
        raise RuntimeBundleError(f"loading {library.name} with TVM's runtime alone failed: "
                            + " | ".join(tail))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def collect_runtime(out: str | os.PathLike, library: str | os.PathLike, cuda: bool = False,
                    python: str | None = None) -> dict:
    """Copy what ``library`` needs to run into ``out`` (a folder to put on ``sys.path``);
    ``python`` ("3.12") for another interpreter than this one. Returns a summary: files,
    bytes, python."""
    out, library = Path(out), Path(library)
    packages = _packages()
    with tempfile.TemporaryDirectory(prefix="tensortune-runtime-") as tmp:
        view = Path(tmp) / "view"
        view.mkdir()
        _runtime_only_view(view, packages)
        found = _probe(view, library, cuda)
        # only what came from the view (modules keep the view's paths, mapped libraries show
        # the installed files): numpy and the standard library are the user's
        wanted = {}
        for p in map(Path, found["files"] + found["libs"]):
            rel = _relative(p, view, packages)
            if rel is not None:
                wanted[rel] = view / rel
        if cuda:
            rel = Path("tvm", "lib", "libtvm_runtime_cuda.so")
            wanted[rel] = view / rel
        out.mkdir(parents=True, exist_ok=True)
        for rel, path in sorted(wanted.items()):
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path.resolve(), out / rel)
            _package_inits(view, path, out)
    if cuda:
        cudart = _cudart(Path(packages["tvm"]) / "lib" / "libtvm_runtime_cuda.so")
        if cudart is not None:
            shutil.copyfile(cudart, out / cudart.name)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if python and python != here:
        _swap_ffi_core(out, python)
    files = [p for p in out.rglob("*") if p.is_file()]
    return {"python": python or here, "files": len(files),
            "bytes": sum(p.stat().st_size for p in files)}


def _relative(path: Path, view: Path, packages: dict[str, Path]) -> Path | None:
    """``path`` relative to the view, whether given in the view or as the installed file."""
    if path.is_relative_to(view):
        return path.relative_to(view)
    for name, src in packages.items():
        if path == src:
            return Path(name)
        if src.is_dir() and path.is_relative_to(src):
            return Path(name) / path.relative_to(src)
    return None


def _package_inits(view: Path, path: Path, out: Path) -> None:
    """Every ``__init__.py`` above ``path``, so each folder imports as a package."""
    for parent in path.relative_to(view).parents:
        init = view / parent / "__init__.py"
        if parent != Path(".") and init.exists() and not (out / parent / "__init__.py").exists():
            shutil.copyfile(init.resolve(), out / parent / "__init__.py")


def _cudart(cuda_lib: Path) -> Path | None:
    """The ``libcudart`` that TVM's CUDA runtime library links, as this machine resolves it."""
    proc = subprocess.run(["ldd", str(cuda_lib)], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        name, _, rest = line.strip().partition(" => ")
        if name.startswith("libcudart.so") and rest.startswith("/"):
            return Path(rest.split()[0])
    return None


def _swap_ffi_core(out: Path, python: str) -> None:
    """Replace ``tvm_ffi``'s compiled core with the one built for ``python`` (pip download)."""
    from importlib.metadata import version

    core = "tvm_ffi/core.cpython-" + python.replace(".", "")
    ffi = version("apache-tvm-ffi")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--python-version", python, "--implementation", "cp", "--platform",
               "manylinux_2_28_x86_64", "--platform", "manylinux_2_24_x86_64", "-d", tmp,
               f"apache-tvm-ffi=={ffi}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise RuntimeBundleError(f"pip could not fetch apache-tvm-ffi=={ffi} for Python {python}: "
                                + (proc.stderr.strip().splitlines() or ["no wheel"])[-1])
        for old in (out / "tvm_ffi").glob("core.cpython-*.so"):
            old.unlink()
        with zipfile.ZipFile(wheels[0]) as whl:
            names = [n for n in whl.namelist() if n.startswith(core)]
            if not names:
                raise RuntimeBundleError(f"{wheels[0].name} holds no {core}*.so")
            for name in names:
                (out / name).write_bytes(whl.read(name))
