"""Parallel kernels whose tasks go to whichever thread asks first (``launcher.c``).

TVM's pool splits each parallel loop into one fixed share per thread, and a kernel ends when
the last share does: a thread that another process keeps off its core holds every kernel
back (DeiT-S on two vCPUs, a busy loop on one: 216 ms, against 43 ms quiet). A kernel library
calls TVM's launcher through a pointer it exports, ``__TVMBackendParallelLaunch``, which TVM
sets when it loads the library; ``install`` points it at ``tt_parallel_launch``: four tasks a
thread, the calling thread taking them from the front and a worker from the back, the caller
waiting only for tasks another thread began (DeiT-S 102 ms with the busy loop, 43-47 ms quiet,
as with TVM's pool; docs/benchmarks.md).

``launcher.c`` is compiled once per source text with the C compiler (``cc``) into
``~/.cache/tensortune``; without one, or with ``TENSORTUNE_TVM_POOL=1``, TVM's pool stays.
"""
from __future__ import annotations

import _ctypes
import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("launcher.c")
KEEP_TVM_POOL = "TENSORTUNE_TVM_POOL"  # set to 1: kernels keep TVM's own launcher
TASKS_PER_THREAD = 4
POINTER = "__TVMBackendParallelLaunch"
BARRIER = b"TVMBackendParallelBarrier"  # a kernel that syncs its tasks needs TVM's pool


def enabled() -> bool:
    return os.environ.get(KEEP_TVM_POOL, "") in ("", "0")


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tensortune"


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """The compiled launcher, loaded and its workers started (once per process); None where
    no C compiler is found or it fails (TVM's pool then stays, and a warning says why)."""
    path = compiled()
    if path is None:
        return None
    lib = ctypes.CDLL(str(path))
    threads = int(os.environ.get("TVM_NUM_THREADS") or len(os.sched_getaffinity(0)))
    lib.tt_pool_init(threads, TASKS_PER_THREAD, -1)
    return lib


def compiled() -> Path | None:
    """The launcher's shared library in the cache, compiled on first use (an export copies
    it beside its model); None where no C compiler is found or it fails."""
    source = SOURCE.read_bytes()
    path = _cache_dir() / f"launcher-{hashlib.sha1(source).hexdigest()[:12]}.so"
    if not path.exists() and not _compile(path):
        return None
    return path


def usable(library_path: str | os.PathLike) -> bool:
    """Whether the kernels of ``library_path`` may run on the launcher: not turned off, and no
    kernel syncs its tasks with TVM's barrier (which only TVM's pool provides)."""
    return enabled() and BARRIER not in Path(library_path).read_bytes()


def _compile(path: Path) -> bool:
    """Compile ``launcher.c`` to ``path``; False (with the compiler's whole message logged)
    where there is no C compiler or it fails."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        log.warning("no C compiler (cc): kernels keep TVM's parallel launcher")
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    # compiled beside its final name and renamed: concurrent processes never load half a file
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".so")
    os.close(fd)
    try:
        done = subprocess.run([compiler, "-O2", "-fPIC", "-shared", "-o", tmp, str(SOURCE),
                               "-lpthread"], capture_output=True, text=True, timeout=120)
        failure = done.stderr if done.returncode != 0 else None
    except (OSError, subprocess.TimeoutExpired) as err:
        failure = str(err)
    if failure is not None:
        os.unlink(tmp)
        log.warning("compiling %s failed, kernels keep TVM's parallel launcher:\n%s", SOURCE,
                    failure)
        return False
    os.replace(tmp, path)
    return True


def install(library_path: str | os.PathLike) -> bool:
    """Point the kernel library at ``library_path`` (already loaded by TVM, which sets the
    pointer when it loads it) to ``tt_parallel_launch``; False where it keeps TVM's pool."""
    path = Path(library_path)
    if not usable(path):
        return False
    launcher = library()
    if launcher is None:
        return False
    kernels = ctypes.CDLL(str(path))  # the library TVM's dlopen already holds
    try:
        pointer = ctypes.c_void_p.in_dll(kernels, POINTER)
        pointer.value = ctypes.cast(launcher.tt_parallel_launch, ctypes.c_void_p).value
        return True
    except ValueError:  # a library without parallel kernels
        return False
    finally:
        # our reference dropped: the library unloads with TVM's module (a tuning worker
        # loads a thousand candidates)
        _ctypes.dlclose(kernels._handle)


def launches() -> int:
    """Launches ``tt_parallel_launch`` has run in this process (0 before it is loaded)."""
    lib = library() if library.cache_info().currsize else None
    return 0 if lib is None else ctypes.c_long.in_dll(lib, "tt_launches").value
