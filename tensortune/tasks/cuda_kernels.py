"""A GPU model's kernels compiled ahead of time, so the GPU host needs no compiler.

TVM 0.27's wheel builds a CUDA library whose kernels are CUDA C: the module that holds them
compiles them when the library is loaded, through the ``tvm_callback_cuda_compile`` global
(NVRTC, or nvcc with ``TVM_CUDA_COMPILE_MODE=nvcc``), which needs TVM's compiler and a CUDA
compiler where the model runs. ``precompile`` compiles each such source here with nvcc for the
target's ``arch`` (TVM's own nvcc call and flags) and ``save_kernels`` writes the binaries by
the source's digest; the loader (``deploy/predict.py``) answers the callback from them.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

KERNELS = "cuda"  # the folder beside the library: <digest>.fatbin per CUDA source


def source_key(code: str) -> str:
    """The name a source's binary is saved under."""
    return hashlib.sha256(code.encode()).hexdigest()[:32]


def cuda_sources(executable) -> list[str]:
    """The CUDA C of every ``cuda`` module in a compiled model's import tree."""
    out, todo = [], [executable.mod if hasattr(executable, "mod") else executable]
    while todo:
        module = todo.pop()
        if getattr(module, "kind", "") == "cuda":
            code = module.inspect_source("cuda")
            if code:
                out.append(code)
        todo.extend(module.imports)
    return out


def precompile(executable, target: dict) -> dict[str, bytes]:
    """``{source_key: fatbin}`` for the CUDA sources of ``executable``, built for ``target``."""
    import tvm
    from tvm.support.nvcc import compile_cuda

    arch = str(target.get("arch", "sm_90"))
    with tvm.target.Target(target):
        return {source_key(code): bytes(compile_cuda(code, target_format="fatbin", arch=arch,
                                                      compiler="nvcc"))
                for code in cuda_sources(executable)}


def save_kernels(directory: str | os.PathLike, kernels: dict[str, bytes]) -> None:
    folder = Path(directory) / KERNELS
    folder.mkdir(parents=True, exist_ok=True)
    for key, blob in kernels.items():
        tmp = folder / f"{key}.fatbin.tmp"
        tmp.write_bytes(blob)
        os.replace(tmp, folder / f"{key}.fatbin")
