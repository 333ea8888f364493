"""Measure a batch: a worker process runs candidates, a supervisor restarts it when it dies or hangs."""
from __future__ import annotations

import math
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from .backends import Backend, make_backend
from .batch import (
    RESULTS, Batch, BatchError, Candidate, append_result, check_data, is_done, load_batch,
    load_data, module_file, read_results, reference_sample, result_line,
)

EXIT_RESTART = 75  # after a runtime error: the CUDA context may hold a sticky error
EXIT_FATAL = 4  # the worker could not start (no backend, unreadable batch)
STARTUP_S = 120.0  # importing CuPy and creating a context; far above the usual seconds
MAX_NUMBER = 1_000_000


class RunnerError(Exception):
    """The batch could not be run at all (the worker cannot start or makes no progress)."""


def _say(text: str) -> None:
    # the supervisor reads these lines; flush so it never waits on a buffer
    print(text, flush=True)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {line}" if line else type(e).__name__


def arch_mismatch(manifest_arch: str, device_arch: str) -> str | None:
    """Why cubins built for ``manifest_arch`` cannot run on ``device_arch`` (None: they can)."""
    want = re.fullmatch(r"sm_(\d+)(\d)([af]?)", manifest_arch)
    have = re.fullmatch(r"sm_(\d+)(\d)", device_arch)
    if not want or not have:
        return None  # the fake, or a naming we cannot judge: let the loader decide
    w_major, w_minor, suffix = int(want[1]), int(want[2]), want[3]
    h_major, h_minor = int(have[1]), int(have[2])
    # a cubin runs on its own major version at an equal or later minor; "a" code only on its own
    ok = w_major == h_major and (h_minor == w_minor if suffix == "a" else h_minor >= w_minor)
    return None if ok else f"the batch is built for {manifest_arch}, the device is {device_arch}"


def measure_candidate(backend: Backend, batch: Batch, cand: Candidate,
                      cache: dict[str, Any], device: str) -> tuple[dict, bool]:
    """Check and time one candidate: its result line, and whether the worker must restart."""
    def fail(kind: str, message: str, sticky: bool) -> tuple[dict, bool]:
        return result_line(cand.index, cand.key, kind, message=message, device=device), sticky

    spec = batch.data[cand.data]
    if cand.data not in cache:
        try:
            host_inputs, ref = load_data(spec)
        except BatchError as e:
            return fail("runtime_error", f"data: {e}", sticky=False)
        try:
            cache[cand.data] = ([backend.upload(a) for a in host_inputs], ref)
        except Exception as e:  # noqa: BLE001 - any device error is this candidate's result
            return fail("runtime_error", f"upload: {_first_line(e)}", sticky=True)
    inputs, ref = cache[cand.data]
    stride = spec.output.stride
    try:
        with module_file(cand.module) as path:
            try:
                handle = backend.load(path, [k.name for k in cand.kernels])
            except Exception as e:  # noqa: BLE001
                return fail("runtime_error", f"load: {_first_line(e)}", sticky=True)
    except (OSError, EOFError) as e:  # a .gz module that does not decompress
        return fail("runtime_error", f"module: {_first_line(e)}", sticky=False)
    timing = batch.timing
    try:
        out = backend.zeros(spec.output.shape, spec.output.dtype)
        buffers = [*inputs, out, *(backend.zeros((n,), dtype) for n, dtype in cand.scratch)]
        backend.expect(ref, stride, len(inputs))
        backend.launch(handle, cand.kernels, buffers)
        backend.synchronize()
        # a reference stored as a strided sample is compared with the same sample
        got = reference_sample(backend.download(out), stride)
        if not _close(got, ref, spec.rtol, spec.atol):
            err = _max_abs_error(got, ref)
            # a kernel that writes out of bounds may have clobbered the shared inputs
            cache.pop(cand.data, None)
            return fail("wrong_result", f"max abs error {err:.4g} (rtol {spec.rtol}, atol {spec.atol})",
                        sticky=False)
        for _ in range(timing.warmup):
            backend.launch(handle, cand.kernels, buffers)
        backend.synchronize()
        one = backend.time(handle, cand.kernels, buffers, 1)
        number = _number(one, timing.min_repeat_ms)
        costs = [backend.time(handle, cand.kernels, buffers, number) for _ in range(timing.repeat)]
    except Exception as e:  # noqa: BLE001
        return fail("runtime_error", _first_line(e), sticky=True)
    graph = ", cuda graph" if backend.graphs else ""
    line = result_line(cand.index, cand.key, "none", costs, message=f"number {number}{graph}",
                       verified=True, device=device)
    return line, False


def _number(one_call_s: float, min_repeat_ms: float) -> int:
    """Calls per repeat so that one repeat lasts at least ``min_repeat_ms``."""
    if min_repeat_ms <= 0:
        return 1
    if not one_call_s > 0:  # a zero (or nan) reading: fall back to the cap, not a division error
        return MAX_NUMBER
    # the epsilon keeps float noise (2 ms / 12.5 us = 160.00000000000003) from adding a call
    return int(min(MAX_NUMBER, max(1, math.ceil(min_repeat_ms / 1e3 / one_call_s - 1e-9))))


def _close(got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> bool:
    if got.shape != ref.shape:
        return False
    if ref.dtype.kind == "b":  # booleans have no tolerance (and no subtraction)
        return bool(np.array_equal(got, ref))
    return bool(np.allclose(got, ref, rtol=rtol, atol=atol))


def _max_abs_error(got: np.ndarray, ref: np.ndarray) -> float:
    if got.shape != ref.shape:
        return float("inf")
    diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    return float(np.nanmax(diff)) if not np.isnan(diff).all() else float("nan")


def run_worker(batch_dir: str | os.PathLike, backend_name: str, out: str | os.PathLike) -> int:
    """The worker loop (``--worker``): returns its exit code; prints protocol lines on stdout."""
    try:
        batch = load_batch(batch_dir)
        backend = make_backend(backend_name)
        arch = backend.arch()
        device = f"{backend.device_name()} ({arch})"
        mismatch = arch_mismatch(batch.arch, arch)
        if mismatch:
            raise RunnerError(mismatch)
    except Exception as e:  # noqa: BLE001 - reported to the supervisor, which raises it
        _say(f"fatal {_first_line(e)}")
        return EXIT_FATAL
    _say(f"ready {device}")
    done = read_results(out)
    cache: dict[str, Any] = {}
    for cand in batch.candidates:
        if is_done(done, cand):
            continue
        _say(f"start {cand.index}")
        line, sticky = measure_candidate(backend, batch, cand, cache, device)
        append_result(out, line)
        if sticky:
            return EXIT_RESTART
    _say("done")
    return 0


def _worker_command(batch_dir: Path, backend: str, out: Path) -> list[str]:
    return [sys.executable, "-u", "-m", "tensortune.device_runner", str(batch_dir),
            "--worker", "--backend", backend, "--out", str(out)]


def worker_env() -> dict[str, str]:
    """The environment for a child process of this package."""
    # the worker must import this package however the parent found it (checkout or install)
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _read_lines(stream, lines: queue.Queue) -> None:
    for raw in stream:
        lines.put(raw.rstrip("\n"))
    lines.put(None)


def _run_one_worker(batch: Batch, backend: str, out: Path, timeout_s: float,
                    state: dict) -> None:
    """Run a worker until it exits or is killed; add the line it could not write itself."""
    by_index = {c.index: c for c in batch.candidates}
    proc = subprocess.Popen(_worker_command(batch.root, backend, out), stdout=subprocess.PIPE,
                            text=True, errors="replace", env=worker_env())
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    current: Candidate | None = None
    fatal = ""
    deadline = time.monotonic() + STARTUP_S
    try:
        while True:
            try:
                text = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                proc.kill()
                proc.wait()
                if current is None:
                    raise RunnerError(f"the worker said nothing for {STARTUP_S:.0f} s") from None
                if not is_done(read_results(out), current):
                    append_result(out, result_line(
                        current.index, current.key, "timeout",
                        message=f"ran over {timeout_s:g} s; worker killed", device=state["device"]))
                return
            if text is None:  # the worker exited
                code = proc.wait()
                if current is not None and not is_done(read_results(out), current):
                    append_result(out, result_line(
                        current.index, current.key, "runtime_error",
                        message=f"worker died (exit code {code})", device=state["device"]))
                if fatal or (current is None and code != 0):
                    raise RunnerError(f"worker failed: {fatal or f'exit code {code}'}")
                return
            word, _, rest = text.partition(" ")
            if word == "start" and rest.strip().lstrip("-").isdigit() and int(rest) in by_index:
                current = by_index[int(rest)]
                deadline = time.monotonic() + timeout_s
                continue
            if word == "ready":
                state["device"] = rest
            elif word == "fatal":
                fatal = rest
            elif word == "done":
                current = None
            else:  # something else on the worker's stdout: pass it on
                print(text, file=sys.stderr)
                continue
            deadline = time.monotonic() + STARTUP_S
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)  # EOF follows the worker's death
        if not reader.is_alive():
            proc.stdout.close()


def run_batch(batch_dir: str | os.PathLike, backend: str = "cupy", timeout_s: float | None = None,
              out: str | os.PathLike | None = None) -> dict:
    """Measure every candidate of a batch not yet in the results file; returns a summary.

    Raises ``BatchError`` for a bad batch and ``RunnerError`` when no worker can run it.
    """
    start = time.monotonic()
    batch = load_batch(batch_dir)
    check_data(batch)  # generated inputs that differ from the exporter's fail the whole batch
    results = Path(out) if out is not None else batch.root / RESULTS
    limit = float(timeout_s) if timeout_s is not None else batch.timing.timeout_s
    state = {"device": ""}
    before = read_results(results)
    resumed = sum(is_done(before, c) for c in batch.candidates)
    workers = 0
    while True:
        done = read_results(results)
        todo = [c for c in batch.candidates if not is_done(done, c)]
        if not todo:
            break
        if workers and len(todo) == state.get("todo"):
            raise RunnerError(f"a worker finished without measuring candidate {todo[0].index}")
        state["todo"] = len(todo)
        workers += 1
        _run_one_worker(batch, backend, results, limit, state)
    counts = Counter(done[c.index]["error"] for c in batch.candidates)
    return {"candidates": len(batch.candidates), "counts": dict(counts), "resumed": resumed,
            "workers": workers, "device": state["device"], "results": str(results),
            "seconds": round(time.monotonic() - start, 3)}


def ordered_results(batch: Batch, results: str | os.PathLike) -> list[dict]:
    """The result lines of ``batch``'s candidates, in manifest order."""
    done = read_results(results)
    return [done[c.index] for c in batch.candidates if is_done(done, c)]
