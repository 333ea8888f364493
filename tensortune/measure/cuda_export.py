"""Batches of built CUDA candidates for ``tensortune.device_runner``, and their results back.

``write_batch`` turns built candidates (``measure.cuda_build``) into a self-contained directory:
``manifest.json`` (format ``tensortune.cuda-batch`` version 2: the timing settings, each
workload's input and output shapes and tolerances, each task once, and per candidate its cubin,
kernels with grid, block and argument order, its key and the record to write once timed),
``data/*.npz`` (the reference output, and the inputs unless they are generated) and
``kernels/*.cubin`` (or ``.cubin.gz``). Generated inputs (``device_runner.batch``) are drawn
from a seed on the GPU host and checked against their sha256, so a model's weights need not
travel; a reference larger than ``reference_bytes`` is stored as a strided sample. The device
runner writes ``results.jsonl`` into it; ``read_results`` pairs those lines with their
candidates again. Version 1 batches are still read.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import full_text, strict
from ..device_runner.batch import generate_array, reference_sample, sha256_of
from ..device_runner.batch import read_results as result_lines
from ..space import Config
from .builder import task_job
from .cuda_build import launch_spec
from .types import BuildResult, ErrorKind, MeasureInput, MeasureResult

FORMAT, VERSION = "tensortune.cuda-batch", 2
logger = logging.getLogger(__name__)
RESULTS = "results.jsonl"
# a reference above this is stored as a strided sample of at most this many bytes
REFERENCE_BYTES = 1 << 20


class ExportError(ValueError):
    """A batch that cannot be written or read back (the message names the problem)."""


@dataclass(frozen=True)
class Timing:
    """How the device runner times each candidate: ``warmup`` calls, then ``repeat`` repeats of
    as many calls as fill ``min_repeat_ms``; a candidate past ``timeout_s`` is a timeout."""

    warmup: int = 3
    repeat: int = 5
    min_repeat_ms: float = 2.0
    timeout_s: float = 10.0

    def to_json(self) -> dict:
        return {"warmup": self.warmup, "repeat": self.repeat,
                "min_repeat_ms": self.min_repeat_ms, "timeout_s": self.timeout_s}


def candidate_key(inp: MeasureInput) -> str:
    """What a result line names its candidate by: the task key and the config, hashed."""
    blob = inp.task.key + json.dumps(inp.config.to_json(), sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def write_batch(out_dir: str | os.PathLike, items: list[tuple[MeasureInput, BuildResult]],
                seed: int = 0, timing: Timing = Timing(), rtol: float = 1e-3,
                atol: float = 1e-3, log: str = "", generate: bool = True,
                reference_bytes: int = REFERENCE_BYTES, compress: bool = False) -> Path:
    """Write built CUDA candidates to ``out_dir`` (which must not hold a batch yet); the
    manifest's path. ``seed`` draws the inputs (generated on the GPU host unless ``generate``
    is off: then stored); ``log`` is the records file ``measure import`` appends to unless
    told another; ``compress`` gzips the cubins (a third of their size)."""
    out = Path(out_dir)
    if (out / "manifest.json").exists():
        raise ExportError(f"{out} already holds a batch; export into a new directory")
    if not items:
        raise ExportError("nothing to export: no candidate built")
    if reference_bytes < 1:
        raise ExportError(f"reference_bytes must be positive, got {reference_bytes}")
    (out / "data").mkdir(parents=True, exist_ok=True)
    (out / "kernels").mkdir(exist_ok=True)
    data: dict[str, dict] = {}
    tasks: dict[str, dict] = {}
    candidates = []
    refused: dict[str, str] = {}  # workloads whose reference could not be made: why
    for position, (inp, build) in enumerate(items):
        index = len(candidates)
        if build.error is not ErrorKind.NONE or not build.path:
            raise ExportError(f"candidate {position} did not build ({build.error.value}): only "
                              "built candidates are exported")
        if inp.task.target.get("kind") != "cuda":
            raise ExportError(f"candidate {position} targets {inp.task.target.get('kind')!r}, not "
                              "cuda")
        workload = inp.task.workload
        name = workload.key
        if name in refused:
            continue
        if name not in data:
            try:
                data[name] = _write_data(out, name, workload, seed, rtol, atol, generate,
                                         reference_bytes)
            except Exception as err:  # one task's reference must not cost the batch its builds
                if strict():
                    raise
                refused[name] = f"{workload.describe()}: {type(err).__name__}: {err}"
                logger.warning("left out of the batch, no reference to check it: %s\n%s",
                            refused[name], full_text(err))
                continue
        tasks.setdefault(inp.task.key, task_job(inp.task))
        module = f"kernels/{index}.cubin" + (".gz" if compress else "")
        with open(build.path, "rb") as f:
            blob = f.read()
        (out / module).write_bytes(gzip.compress(blob, 9, mtime=0) if compress else blob)
        spec = launch_spec(build.path)
        candidates.append({
            "index": index, "key": candidate_key(inp), "data": name, "module": module,
            "kernels": spec["kernels"], "scratch": spec.get("scratch", []),
            "record": {"task": inp.task.key, "config": inp.config.to_json(),
                       "build_s": round(build.build_s, 3),
                       "features": {"hardware_cuda": spec.get("hardware_cuda")}},
        })
    if not candidates:
        raise ExportError("no candidate has a reference to check it against: "
                          + "; ".join(refused.values()))
    arch = str(items[0][0].task.target.get("arch", "sm_90"))
    manifest = {"format": FORMAT, "version": VERSION, "arch": arch, "created": time.time(),
                "numpy": np.__version__, "log": str(log), "timing": timing.to_json(),
                "data": data, "tasks": tasks, "candidates": candidates}
    path = out / "manifest.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, separators=(",", ":")))
    os.replace(tmp, path)  # a batch is either whole or absent
    return path


def input_spec(dtype: str, seed: int) -> dict:
    """How an input of ``dtype`` is generated: floats uniform in [-1, 1), booleans 0 or 1,
    integers zero (usually indices: zero is in bounds for every gather), as
    ``PrimFuncWorkload.random_inputs`` draws them."""
    kind = np.dtype(dtype).kind
    low, high = (-1.0, 1.0) if kind in "fc" else (0.0, 2.0) if kind == "b" else (0.0, 0.0)
    return {"seed": seed, "low": low, "high": high}


def _input_seed(seed: int, i: int) -> int:
    """A non-negative seed per input (the batch's seed may be negative)."""
    return int(hashlib.sha256(f"{seed}:{i}".encode()).hexdigest()[:12], 16)


def sample_stride(shape, itemsize: int, limit_bytes: int) -> int:
    """1 when the whole array fits in ``limit_bytes``, else a prime at least 11 that divides no
    dimension, so the sample meets every channel, row and column, of at most the limit."""
    n = math.prod(shape)
    if n * itemsize <= limit_bytes:
        return 1
    p = max(11, math.ceil(n / max(1, limit_bytes // itemsize)))
    while any(p % q == 0 for q in range(2, math.isqrt(p) + 1)) or \
            any(d % p == 0 for d in shape):
        p += 1
    return p


def _write_data(out: Path, name: str, workload, seed: int, rtol: float, atol: float,
                generate: bool, reference_bytes: int) -> dict:
    dtypes = workload.input_dtypes
    if generate:
        gens = [input_spec(d, _input_seed(seed, i)) for i, d in enumerate(dtypes)]
        inputs = [generate_array(s, d, **g)
                  for s, d, g in zip(workload.input_shapes, dtypes, gens)]
    else:
        inputs = workload.random_inputs(seed)
    reference = np.asarray(workload.reference(*inputs), dtype=workload.dtype)
    stride = sample_stride(reference.shape, reference.dtype.itemsize, reference_bytes)
    arrays = {} if generate else {f"in{i}": np.require(x, requirements="C")
                                    for i, x in enumerate(inputs)}
    np.savez(out / "data" / f"{name}.npz", **arrays, ref=reference_sample(reference, stride))
    specs = [{"shape": list(x.shape), "dtype": str(x.dtype)} for x in inputs]
    if generate:
        specs = [{**s, "generate": g, "sha256": sha256_of(x)}
                 for s, g, x in zip(specs, gens, inputs)]
    output = {"shape": list(reference.shape), "dtype": str(reference.dtype)}
    return {"file": f"data/{name}.npz", "inputs": specs,
            "output": {**output, "stride": stride} if stride > 1 else output,
            "rtol": rtol, "atol": atol, "describe": workload.describe()}


def read_manifest(batch_dir: str | os.PathLike) -> dict:
    path = Path(batch_dir) / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise ExportError(f"{batch_dir} holds no manifest.json: not an exported batch") from None
    except json.JSONDecodeError as err:
        raise ExportError(f"{path}: not JSON ({err})") from None
    if manifest.get("format") != FORMAT or manifest.get("version") not in (1, VERSION):
        raise ExportError(f"{path}: format {manifest.get('format')!r} version "
                          f"{manifest.get('version')!r}, expected {FORMAT!r} 1 to {VERSION}")
    tasks = manifest.get("tasks") or {}
    for cand in manifest.get("candidates", []):  # version 2 holds each task once: look it up
        rec = cand.get("record") or {}
        if isinstance(rec.get("task"), str):
            if rec["task"] not in tasks:
                raise ExportError(f"{path}: candidate {cand.get('index')} names task "
                                  f"{rec['task']!r}, which the manifest does not hold")
            rec["task"] = tasks[rec["task"]]
    return manifest


def read_results(batch_dir: str | os.PathLike) -> tuple[list[tuple[MeasureInput, MeasureResult]],
                                                        list[int]]:
    """The timed candidates of a batch as (input, result) pairs, and the indices that have no
    result yet. A result line whose key does not match its candidate is refused."""
    from ..workload import Task, workload_from_dict

    manifest = read_manifest(batch_dir)
    lines = result_lines(Path(batch_dir) / RESULTS)
    done, missing = [], []
    for cand in manifest["candidates"]:
        line = lines.get(cand["index"])
        if line is None:
            missing.append(cand["index"])
            continue
        if line.get("key") != cand["key"]:
            raise ExportError(f"result for candidate {cand['index']} names key "
                              f"{line.get('key')!r}, the batch has {cand['key']!r}")
        rec = cand["record"]
        t = rec["task"]
        task = Task(workload_from_dict(t["workload"]), t["target"], t["template"])
        inp = MeasureInput(task, Config.from_json(rec["config"]))
        done.append((inp, result_of(line, rec.get("build_s", 0.0))))
    return done, missing


def result_of(line: dict, build_s: float = 0.0) -> MeasureResult:
    """A device runner's result line as a ``MeasureResult``."""
    try:
        error = ErrorKind(line.get("error", "none"))
    except ValueError:
        error = ErrorKind.RUNTIME_ERROR
    costs = tuple(float(c) for c in line.get("costs", ())) if error is ErrorKind.NONE else ()
    if error is ErrorKind.NONE and not costs:
        error = ErrorKind.RUNTIME_ERROR
    return MeasureResult(costs, error, str(line.get("message", ""))[:300], build_s=build_s,
                         run_s=float(line.get("run_s", 0.0)),
                         verified=bool(line.get("verified")), timestamp=float(line.get("ts", 0)),
                         device=str(line.get("device", "cuda")))

