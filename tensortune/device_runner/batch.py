"""The batch directory: manifest validation, data loading and the results file.

Format version 2 (version 1 is still read) lets an input be generated instead of stored: its
spec carries ``"generate": {"seed", "low", "high"}`` and the ``sha256`` of the array, which
``generate_array`` rebuilds from PCG64's raw bits (the bit stream numpy keeps stable across
versions; the conversion to floats is done here, not by numpy's distributions). The output spec
may carry a ``stride``: the stored reference is then every stride-th element of the flat output.
A module path ending in ``.gz`` is a gzip-compressed cubin.
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

FORMAT = "tensortune.cuda-batch"
VERSION = 2
RESULTS = "results.jsonl"
ERROR_KINDS = ("none", "runtime_error", "timeout", "wrong_result")


class BatchError(Exception):
    """A batch directory that cannot be run: the message names the file or field."""


@dataclass(frozen=True)
class Timing:
    warmup: int
    repeat: int
    min_repeat_ms: float
    timeout_s: float


@dataclass(frozen=True)
class Generated:
    """How an input is drawn (``generate_array``) and the sha256 the exporter's array had."""

    seed: int
    low: float
    high: float
    sha256: str


@dataclass(frozen=True)
class ArraySpec:
    shape: tuple[int, ...]
    dtype: np.dtype
    generate: Generated | None = None  # inputs: drawn here, not read from the npz
    stride: int = 1  # the output: the reference holds every stride-th element


@dataclass(frozen=True)
class DataSpec:
    name: str
    file: Path
    inputs: tuple[ArraySpec, ...]
    output: ArraySpec
    rtol: float
    atol: float


@dataclass(frozen=True)
class KernelSpec:
    """One launch: ``args`` index into [inputs..., output]."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: tuple[int, ...]


@dataclass(frozen=True)
class Candidate:
    index: int
    key: str
    data: str
    module: Path
    kernels: tuple[KernelSpec, ...]
    record: Any = field(default=None, compare=False)
    # (elements, dtype) of each scratch buffer the kernels share (a split-K's partial sums):
    # kernel arguments past the output index them
    scratch: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class Batch:
    root: Path
    arch: str
    timing: Timing
    data: dict[str, DataSpec]
    candidates: tuple[Candidate, ...]


def _get(obj: Any, key: str, kind: type | tuple, where: str) -> Any:
    if not isinstance(obj, dict):
        raise BatchError(f"manifest.json: {where} is not an object")
    if key not in obj:
        raise BatchError(f"manifest.json: {where}.{key} is missing")
    value = obj[key]
    # bool is an int in Python; a flag where a count belongs is a mistake
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise BatchError(f"manifest.json: {where}.{key} must not be a boolean")
    if not isinstance(value, kind):
        raise BatchError(f"manifest.json: {where}.{key} has type {type(value).__name__}")
    return value


def _number(obj: Any, key: str, where: str, low: float, strict: bool = False) -> float:
    value = float(_get(obj, key, (int, float), where))
    if value < low or (strict and value == low) or value != value:
        bound = f"> {low}" if strict else f">= {low}"
        raise BatchError(f"manifest.json: {where}.{key} is {value}, must be {bound}")
    return value


def _file(root: Path, rel: Any, where: str) -> Path:
    # the manifest may come over the network: its paths must stay inside the batch
    if not isinstance(rel, str) or not rel:
        raise BatchError(f"manifest.json: {where} must be a relative path")
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or "\\" in rel:
        raise BatchError(f"manifest.json: {where} '{rel}' leaves the batch directory")
    path = root / pure
    if not path.is_file():
        raise BatchError(f"{where}: missing file {rel}")
    return path


def _array_spec(obj: Any, where: str) -> ArraySpec:
    shape = _get(obj, "shape", list, where)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise BatchError(f"manifest.json: {where}.shape must be a list of ints >= 0")
    name = _get(obj, "dtype", str, where)
    try:
        dtype = np.dtype(name)
    except TypeError:
        raise BatchError(f"manifest.json: {where}.dtype '{name}' is not a numpy dtype") from None
    if dtype.hasobject or dtype.kind not in "biufc":
        raise BatchError(f"manifest.json: {where}.dtype '{name}' is not numeric")
    generate = None
    if "generate" in obj:
        gen = _get(obj, "generate", dict, where)
        seed = _get(gen, "seed", int, f"{where}.generate")
        if seed < 0:
            raise BatchError(f"manifest.json: {where}.generate.seed is negative")
        low = float(_get(gen, "low", (int, float), f"{where}.generate"))
        high = float(_get(gen, "high", (int, float), f"{where}.generate"))
        if not (math.isfinite(low) and math.isfinite(high) and low <= high):
            raise BatchError(f"manifest.json: {where}.generate needs finite low <= high")
        digest = _get(obj, "sha256", str, where)
        if len(digest) != 64:
            raise BatchError(f"manifest.json: {where}.sha256 is not a sha256 hex digest")
        generate = Generated(seed, low, high, digest)
    stride = _get(obj, "stride", int, where) if "stride" in obj else 1
    if stride < 1:
        raise BatchError(f"manifest.json: {where}.stride must be >= 1")
    return ArraySpec(tuple(shape), dtype, generate, stride)


def _dim3(obj: Any, key: str, where: str) -> tuple[int, int, int]:
    dims = _get(obj, key, list, where)
    if not 1 <= len(dims) <= 3 or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims
    ):
        raise BatchError(f"manifest.json: {where}.{key} must be 1 to 3 ints >= 1")
    return tuple(dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


def _data(root: Path, name: str, obj: Any) -> DataSpec:
    where = f"data.{name}"
    file = _file(root, _get(obj, "file", str, where), f"{where}.file")
    inputs = tuple(
        _array_spec(x, f"{where}.inputs[{i}]")
        for i, x in enumerate(_get(obj, "inputs", list, where))
    )
    output = _array_spec(_get(obj, "output", dict, where), f"{where}.output")
    rtol, atol = _number(obj, "rtol", where, 0.0), _number(obj, "atol", where, 0.0)
    return DataSpec(name, file, inputs, output, rtol, atol)


def _kernel(obj: Any, where: str, n_buffers: int) -> KernelSpec:
    args = _get(obj, "args", list, where)
    for j, a in enumerate(args):
        if not isinstance(a, int) or isinstance(a, bool) or not 0 <= a < n_buffers:
            raise BatchError(
                f"manifest.json: {where}.args[{j}]: index {a!r} out of range "
                f"0..{n_buffers - 1} (the inputs, the output and any scratch buffers)"
            )
    shared = _get(obj, "shared_bytes", int, where)
    if shared < 0:
        raise BatchError(f"manifest.json: {where}.shared_bytes is negative")
    return KernelSpec(
        _get(obj, "name", str, where), _dim3(obj, "grid", where), _dim3(obj, "block", where),
        shared, tuple(args),
    )


def _candidate(root: Path, i: int, obj: Any, data: dict[str, DataSpec],
               tasks: dict) -> Candidate:
    where = f"candidates[{i}]"
    index = _get(obj, "index", int, where)
    name = _get(obj, "data", str, where)
    if name not in data:
        raise BatchError(f"manifest.json: {where}.data: unknown data name '{name}'")
    scratch = tuple(_scratch(x, f"{where}.scratch[{j}]")
                    for j, x in enumerate(obj.get("scratch") or []))
    n_buffers = len(data[name].inputs) + 1 + len(scratch)
    kernels = _get(obj, "kernels", list, where)
    if not kernels:
        raise BatchError(f"manifest.json: {where}.kernels is empty")
    return Candidate(
        index=index, key=_get(obj, "key", str, where), data=name,
        module=_file(root, _get(obj, "module", str, where), f"{where}.module"),
        kernels=tuple(_kernel(k, f"{where}.kernels[{j}]", n_buffers) for j, k in enumerate(kernels)),
        record=_record(obj.get("record"), tasks), scratch=scratch,
    )


def _scratch(obj: Any, where: str) -> tuple[int, str]:
    shape = _get(obj, "shape", list, where)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        raise BatchError(f"manifest.json: {where}.shape {shape!r} is not positive integers")
    dtype = _get(obj, "dtype", str, where)
    try:
        np.dtype(dtype)
    except TypeError:
        raise BatchError(f"manifest.json: {where}.dtype {dtype!r} is no numpy dtype") from None
    return int(np.prod(shape)), dtype


def _record(record: Any, tasks: dict) -> Any:
    """The exporter's opaque record, its task looked up where it names one of ``tasks`` (a
    version 2 manifest holds each task once)."""
    if isinstance(record, dict) and isinstance(record.get("task"), str) \
            and record["task"] in tasks:
        return {**record, "task": tasks[record["task"]]}
    return record


def load_batch(batch_dir: str | os.PathLike) -> Batch:
    """Read and validate ``DIR/manifest.json``; raises ``BatchError`` naming the problem."""
    root = Path(batch_dir)
    path = root / "manifest.json"
    if not path.is_file():
        raise BatchError(f"missing file {path}")
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BatchError(f"manifest.json is not readable JSON: {e}") from None
    if not isinstance(doc, dict):
        raise BatchError("manifest.json: the top level is not an object")
    if doc.get("format") != FORMAT:
        raise BatchError(f"manifest.json: field 'format' is {doc.get('format')!r}, expected {FORMAT!r}")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= VERSION:
        raise BatchError(f"manifest.json: field 'version' is {version!r}; this runner reads 1..{VERSION}")
    timing_obj = _get(doc, "timing", dict, "manifest")
    timing = Timing(
        warmup=int(_number(timing_obj, "warmup", "timing", 0)),
        repeat=int(_number(timing_obj, "repeat", "timing", 1)),
        min_repeat_ms=_number(timing_obj, "min_repeat_ms", "timing", 0.0),
        timeout_s=_number(timing_obj, "timeout_s", "timing", 0.0, strict=True),
    )
    data = {name: _data(root, name, obj) for name, obj in _get(doc, "data", dict, "manifest").items()}
    tasks = doc.get("tasks") if isinstance(doc.get("tasks"), dict) else {}
    candidates = tuple(
        _candidate(root, i, obj, data, tasks)
        for i, obj in enumerate(_get(doc, "candidates", list, "manifest"))
    )
    seen: set[int] = set()
    for c in candidates:
        if c.index in seen:
            raise BatchError(f"manifest.json: candidate index {c.index} appears twice")
        seen.add(c.index)
    return Batch(root, _get(doc, "arch", str, "manifest"), timing, data, candidates)


def generate_array(shape, dtype, seed: int, low: float, high: float) -> np.ndarray:
    """``low + (high - low) * u`` for u uniform in [0, 1), rounded down for integer and boolean
    dtypes. u is drawn as numpy's ``Generator.random`` draws it (the top 53 bits of each of
    PCG64's raw 64-bit outputs), but from the bit stream itself, which stays the same across
    numpy versions where the distributions may not."""
    dtype = np.dtype(dtype)
    raw = np.random.default_rng(seed).bit_generator.random_raw(math.prod(shape))
    x = low + (high - low) * ((raw >> 11).astype(np.float64) * (1.0 / 9007199254740992.0))
    if dtype.kind in "biu":
        x = np.floor(x)
    return np.asarray(x.astype(dtype)).reshape(tuple(shape))


def sha256_of(array: np.ndarray) -> str:
    """The sha256 of an array's bytes in C order."""
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def reference_sample(array: np.ndarray, stride: int) -> np.ndarray:
    """What a reference stored with ``stride`` holds: every stride-th element, flat."""
    return np.ascontiguousarray(array).reshape(-1)[::stride] if stride > 1 else array


def load_data(spec: DataSpec) -> tuple[list[np.ndarray], np.ndarray]:
    """The inputs (read or generated) and the reference output of one data entry, checked
    against the manifest; with ``spec.output.stride`` > 1 the reference is the flat sample."""
    try:
        with np.load(spec.file, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as e:
        raise BatchError(f"{spec.file.name}: cannot read npz: {e}") from None
    inputs = []
    for i, want in enumerate(spec.inputs):
        if want.generate is None:
            inputs.append(_stored(arrays, spec.file.name, f"in{i}", want.shape, want.dtype))
            continue
        g = want.generate
        array = generate_array(want.shape, want.dtype, g.seed, g.low, g.high)
        digest = sha256_of(array)
        if digest != g.sha256:
            raise BatchError(
                f"data.{spec.name}.inputs[{i}]: the generated input's sha256 is {digest[:16]}..., "
                f"the manifest's {g.sha256[:16]}...: numpy {np.__version__} here does not draw "
                "the exporter's numbers; export the batch with its inputs stored")
        inputs.append(array)
    out = spec.output
    size = math.prod(out.shape)
    ref_shape = (len(range(0, size, out.stride)),) if out.stride > 1 else out.shape
    return inputs, _stored(arrays, spec.file.name, "ref", ref_shape, out.dtype)


def _stored(arrays: dict, file: str, name: str, shape: tuple, dtype: np.dtype) -> np.ndarray:
    got = arrays.get(name)
    if got is None:
        raise BatchError(f"{file}: array '{name}' is missing")
    if got.shape != tuple(shape) or got.dtype != dtype:
        raise BatchError(f"{file}: array '{name}' is {got.dtype}{list(got.shape)}, "
                         f"manifest says {dtype}{list(shape)}")
    return got


def check_data(batch: Batch) -> None:
    """Load every data entry once (generating its inputs): ``BatchError`` if one cannot be read
    or generated as exported, before any candidate runs."""
    for spec in batch.data.values():
        load_data(spec)


@contextlib.contextmanager
def module_file(path: Path):
    """A path to the module's cubin: ``path`` itself, or a decompressed temporary copy of a
    ``.gz`` one (removed afterwards: a loaded module no longer needs its file)."""
    if path.suffix != ".gz":
        yield str(path)
        return
    fd, tmp = tempfile.mkstemp(suffix=".cubin", prefix="tt-kernel-")
    try:
        with os.fdopen(fd, "wb") as f, gzip.open(path, "rb") as z:
            shutil.copyfileobj(z, f)
        yield tmp
    finally:
        os.unlink(tmp)


def result_line(index: int, key: str, error: str, costs=(), message: str = "",
                verified: bool = False, device: str = "") -> dict:
    """One line of results.jsonl; costs (seconds per repeat) only when error is "none"."""
    assert error in ERROR_KINDS, error
    return {
        "v": 1, "index": index, "key": key,
        "costs": [float(c) for c in costs] if error == "none" else [],
        "error": error, "message": message, "verified": bool(verified),
        "device": device, "ts": time.time(),
    }


def append_result(path: str | os.PathLike, line: dict) -> None:
    """Append one result line and make it durable before the next candidate starts."""
    with open(path, "a+b") as f:
        # a worker killed mid-write leaves a partial line: start on a fresh one
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write(json.dumps(line).encode() + b"\n")
        f.flush()
        os.fsync(f.fileno())


def read_results(path: str | os.PathLike) -> dict[int, dict]:
    """The result lines already written, by candidate index (partial lines are skipped)."""
    done: dict[int, dict] = {}
    try:
        with open(path, "rb") as f:
            for raw in f:
                try:
                    line = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue
                if isinstance(line, dict) and isinstance(line.get("index"), int):
                    done[line["index"]] = line
    except FileNotFoundError:
        pass
    return done


def is_done(done: dict[int, dict], cand: Candidate) -> bool:
    """Whether ``cand`` has a line (for this same key: a reused results file may be stale)."""
    line = done.get(cand.index)
    return line is not None and line.get("key") == cand.key
