"""A small pool of persistent worker processes that outlives jobs that crash or hang.

Workers are started with the "spawn" context (TVM's threads and LLVM state must not be forked),
or from a "forkserver" that imported the ``preload`` modules once and never ran a kernel or a
compiler (a replacement then starts in milliseconds instead of the seconds an import of TVM
takes); they import their heavy modules through ``initializer`` and then serve jobs over a
``Pipe`` until closed. A job that overruns its time limit gets its worker killed and replaced;
a job that kills its worker (a segfault in generated code) is reported with the signal and the
worker replaced.
A replacement that fails to start is tried again, up to ``REPLACE_ATTEMPTS`` times.
"""
from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait

from ..errors import full_text

TIMEOUT = "timeout"
CRASHED = "crashed"
ERROR = "error"  # the job raised; the worker is fine

STARTUP_TIMEOUT_S = 300.0  # importing TVM on a loaded 2-core machine can take a while
# a replacement that fails to start is retried: a start can fail for passing reasons (memory
# pressure, a neighbour's load) and a failed start would otherwise end the whole run
REPLACE_ATTEMPTS = 3
REPLACE_BACKOFF_S = 1.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobFailure:
    """Marker returned by ``WorkerPool.map`` in place of a result that could not be had."""

    kind: str  # TIMEOUT, CRASHED or ERROR
    message: str
    exitcode: int | None = None
    limit_s: float = 0.0  # for TIMEOUT: the limit the job overran
    detail: str = ""  # for ERROR: the job's traceback (``message`` is its first line)


def describe_exit(exitcode: int | None) -> str:
    """``"SIGSEGV"`` for a worker killed by a signal, ``"exit code 3"`` otherwise."""
    if exitcode is not None and exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def first_line(err: BaseException) -> str:
    """The first line of an error that says something (TVM messages start with tracebacks)."""
    for line in str(err).splitlines():
        line = line.strip()
        if line and not line.startswith(("Traceback", "File ", "note:", "^")):
            return f"{type(err).__name__}: {line}"[:300]
    return type(err).__name__


def pin_and_init(cpus: tuple[int, ...] | None, initializer: Callable[[], None] | None) -> None:
    """Worker start-up: keep this process (and the threads it starts) on ``cpus``, then run
    ``initializer``. Builds and timings pinned to disjoint cores never disturb each other."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    if initializer is not None:
        initializer()


def _serve(conn, initializer, affinity) -> None:
    """Body of a worker process: initialize, say ready, then answer ``(fn, job)`` requests."""
    if affinity:  # the pool owner's cores now, not the forkserver's at its start
        os.sched_setaffinity(0, affinity)
    if initializer is not None:
        initializer()
    conn.send(("ready", None))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        fn, job = request
        try:
            reply = ("ok", fn(job))
        except Exception as err:  # report, keep serving: one bad job must not cost a restart
            reply = ("error", (first_line(err), full_text(err)))
        conn.send(reply)


@contextlib.contextmanager
def _main_hidden():
    """Start processes without the main module: multiprocessing would re-run a script given by
    path (or import a module given by name) in the forkserver and in each worker, and a user's
    script without a ``__main__`` guard would start its whole run again there and fail. Workers
    only run this package's functions, so they never need it."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__")
             if main is not None and main.__dict__.get(k) is not None}
    for k in saved:
        if k == "__spec__":
            main.__spec__ = None  # a module run with -m would be imported by name instead
        else:
            del main.__file__
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


class _Worker:
    def __init__(self, ctx, initializer):
        self.conn, child = ctx.Pipe()
        affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        self.process = ctx.Process(target=_serve, args=(child, initializer, affinity), daemon=True)
        with _main_hidden():
            self.process.start()
        child.close()  # so that the worker's death shows up as EOF on our end

    def await_ready(self) -> None:
        if not self.conn.poll(STARTUP_TIMEOUT_S):
            self.kill()
            raise RuntimeError(f"worker did not start within {STARTUP_TIMEOUT_S:.0f} s")
        try:
            self.conn.recv()
        except EOFError:
            self.process.join()
            raise RuntimeError(f"worker failed to start ({describe_exit(self.process.exitcode)})") from None

    def kill(self) -> int | None:
        self.process.kill()
        self.process.join()
        self.conn.close()
        return self.process.exitcode

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.process.join(timeout=2.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class WorkerPool:
    """``workers`` persistent processes; ``map`` runs jobs on them with a per-job time limit.
    With ``preload`` (module names) they start from a forkserver that imported those."""

    def __init__(self, workers: int = 1, initializer: Callable[[], None] | None = None,
                 preload: Sequence[str] = ()):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.size = workers
        self._initializer = initializer
        if preload and "forkserver" in mp.get_all_start_methods():
            self._ctx = mp.get_context("forkserver")
            # one forkserver per process: the first pool to start it decides what it holds
            self._ctx.set_forkserver_preload(list(preload))
        else:
            self._ctx = mp.get_context("spawn")
        self._workers: list[_Worker] = []
        self._starting = threading.Lock()

    def start(self) -> None:
        """Start the workers now (``map`` otherwise starts them on first use)."""
        with self._starting:
            if not self._workers:
                workers = [_Worker(self._ctx, self._initializer) for _ in range(self.size)]
                for w in workers:
                    w.await_ready()
                self._workers = workers

    def start_soon(self) -> None:
        """Start the workers in a background thread (a failure shows at the first ``map``)."""
        def start():
            try:
                self.start()
            except RuntimeError:
                pass  # ``map`` starts them again and raises

        threading.Thread(target=start, name="worker-pool-start", daemon=True).start()

    def _replace(self, slot: int) -> None:
        for attempt in range(1, REPLACE_ATTEMPTS + 1):
            w = _Worker(self._ctx, self._initializer)
            try:
                w.await_ready()
            except RuntimeError as err:
                log.warning("replacement worker failed to start (attempt %d of %d): %s",
                            attempt, REPLACE_ATTEMPTS, err)
                if attempt == REPLACE_ATTEMPTS:
                    raise RuntimeError(f"could not replace a worker in {attempt} attempts; "
                                       f"the last: {err}") from None
                time.sleep(REPLACE_BACKOFF_S * attempt)
            else:
                self._workers[slot] = w
                return

    def map(self, fn: Callable, jobs: Sequence, timeout_s: float | Callable,
            counted: Callable[[object], bool] | None = None) -> list:
        """``fn(job)`` for each job, in order; a ``JobFailure`` where a job failed to deliver.

        ``fn`` must be a module-level function (it is pickled by reference). ``timeout_s`` is
        seconds per job, or a function from the seconds the jobs done so far took to that limit
        (asked again after each job, so a limit can tighten while the batch runs); with
        ``counted``, only the jobs whose result it accepts.
        """
        if not jobs:
            return []
        self.start()
        limit_of = timeout_s if callable(timeout_s) else (lambda _done: timeout_s)
        done_s: list[float] = []
        limit = limit_of(done_s)
        results: list = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        idle = deque(range(self.size))
        running: dict[int, tuple[int, float]] = {}  # slot -> (job index, start)
        while pending or running:
            while pending and idle:
                slot, index = idle.popleft(), pending.popleft()
                if not self._workers[slot].process.is_alive():  # died while idle
                    self._workers[slot].kill()
                    self._replace(slot)
                self._workers[slot].conn.send((fn, jobs[index]))
                running[slot] = (index, time.monotonic())
            soonest = min(start for _, start in running.values()) + limit
            wait([self._workers[s].conn for s in running], timeout=max(0.0, soonest - time.monotonic()))
            for slot, (index, start) in list(running.items()):
                worker = self._workers[slot]
                if worker.conn.poll():
                    try:
                        status, value = worker.conn.recv()
                    except (EOFError, OSError):
                        code = worker.kill()
                        results[index] = JobFailure(CRASHED, f"worker died ({describe_exit(code)})", code)
                        log.debug("job %d crashed its worker (%s); replacing it", index,
                                  describe_exit(code))
                        self._replace(slot)
                    else:
                        results[index] = (value if status == "ok" else
                                          JobFailure(ERROR, value[0], detail=value[1]))
                        if status == "ok" and (counted is None or counted(value)):
                            done_s.append(time.monotonic() - start)
                            limit = limit_of(done_s)
                elif time.monotonic() >= start + limit:
                    worker.kill()
                    results[index] = JobFailure(TIMEOUT, f"no result within {limit:g} s",
                                                limit_s=limit)
                    log.debug("job %d overran %g s; killed its worker, replacing it", index, limit)
                    self._replace(slot)
                else:
                    continue
                del running[slot]
                idle.append(slot)
        return results

    def close(self) -> None:
        """Stop every worker; the pool starts afresh if used again."""
        for w in self._workers:
            w.stop()
        self._workers = []

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
