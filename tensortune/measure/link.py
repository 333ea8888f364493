"""Linking a candidate's object file into the shared library the runner loads.

TVM's ``export_library`` links through ``g++``: on a build of 150-200 ms, the compiler driver's
start-up alone is 30-40 ms, a fifth of every candidate's build. The linker itself (``ld``) needs
4 ms. TVM's objects reference only the TVM runtime (resolved when the runtime loads them, as
with ``g++``) and, for a few operations, the compiler's helper routines, which come from
``libgcc.a``. Where ``ld`` or ``gcc`` is missing, or the inputs are not all objects, TVM's own
``create_shared`` links as before.
"""
from __future__ import annotations

import functools
import shutil
import subprocess


@functools.lru_cache(maxsize=1)
def _libgcc() -> str | None:
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    try:
        path = subprocess.run([gcc, "-print-libgcc-file-name"], capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return path or None


def fast_link(output, objects, options=None, cc=None, cwd=None, ccache_env=None) -> None:
    """``export_library``'s ``fcompile``: ``ld -shared`` on TVM's objects, with ``libgcc.a``
    for compiler helpers; TVM's ``create_shared`` (``g++``) when that can't be done."""
    objects = [objects] if isinstance(objects, str) else list(objects)
    ld, libgcc = shutil.which("ld"), _libgcc()
    if ld is None or libgcc is None or options or cc or not all(
            str(o).endswith(".o") for o in objects):
        from tvm.support import cc as tvm_cc

        tvm_cc.create_shared(output, objects, options, cc, cwd, ccache_env)
        return
    proc = subprocess.run([ld, "-shared", "-o", str(output), *map(str, objects), libgcc],
                          capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        raise RuntimeError(f"ld failed ({proc.returncode}): {proc.stderr.strip()[:300]}")
