"""Feature rows kept on disk, so costly extractors (``hardware`` compiles every candidate) run
once per candidate across evaluations, benchmarks and sessions.

A store is a directory with one append-only JSON-lines file per extractor and version,
``<name>-v<version>.jsonl``; each line is ``{"task": task key, "config": config, "row": [...]}``.
The task key already hashes workload, target, template and TVM version, so a row is never
served for a candidate it was not computed for. A torn last line (a killed run) is skipped.
``pack`` moves the appended rows into ``<name>-v<version>.jsonl.gz`` (a sixth of the size);
rows are read from both files, and new ones are always appended to the plain one.
A store may also read (never write) other stores' rows (``also``), e.g. a history dataset's.

    store = FeatureStore("data/cpu.features")
    hw = store.wrap(make_extractor("hardware"))
    fill(store, "hardware", inputs, jobs=2)   # precompute in worker processes
    X = hw.extract(inputs)                    # served from disk
"""
from __future__ import annotations

import gzip
import inspect
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..measure.types import MeasureInput
from ..space import Config
from .base import FeatureExtractor

log = logging.getLogger(__name__)
# only these are worth persisting: the others cost microseconds to milliseconds per row
COSTLY = ("hardware", "hardware_cuda")


def _config_key(config: Config) -> str:
    return json.dumps(config.to_json(), sort_keys=True, separators=(",", ":"))


class StoredExtractor(FeatureExtractor):
    """``inner`` with its rows read from and appended to one file of a ``FeatureStore``."""

    def __init__(self, inner, path: Path, read_only: bool = False, also: Sequence[Path] = ()):
        self.inner = inner
        self.name = inner.name
        self.path = path
        self.read_only = read_only  # rows computed now are kept in memory only
        self._rows: dict[tuple[str, str], np.ndarray] = {}
        for source in (*also, path):
            self._load(source)

    def _load(self, path: Path) -> None:
        for source in (packed(path), path):  # appended rows are newer than packed ones
            for key, _, row in _read_rows(source):
                self._rows[key] = row

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, inp: MeasureInput) -> bool:
        return (inp.task.key, _config_key(inp.config)) in self._rows

    def add(self, inputs: Sequence[MeasureInput], rows: np.ndarray) -> None:
        """Keep and append rows computed elsewhere (e.g. by ``fill``'s workers)."""
        lines = []
        for inp, row in zip(inputs, rows):
            key = (inp.task.key, _config_key(inp.config))
            if key in self._rows:
                continue
            self._rows[key] = np.asarray(row, dtype=np.float32)
            lines.append(json.dumps({"task": key[0], "config": json.loads(key[1]),
                                     "row": [float(f"{v:.6g}") for v in row.tolist()]},
                                    separators=(",", ":")))
        if lines and not self.read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:
                f.write("\n".join(lines) + "\n")
                f.flush()
                os.fsync(f.fileno())

    def close(self) -> None:
        self.inner.close()

    def computing(self) -> FeatureExtractor:
        return self.inner.computing()

    def extract(self, inputs: Sequence[MeasureInput]) -> np.ndarray:
        keys = [(inp.task.key, _config_key(inp.config)) for inp in inputs]
        missing = [i for i, k in enumerate(keys) if k not in self._rows]
        if missing:
            todo = [inputs[i] for i in missing]
            self.add(todo, self.inner.extract(todo))
        if not inputs:
            return self.inner.extract([])
        return np.stack([self._rows[k] for k in keys]).astype(np.float32, copy=False)


def packed(path: Path) -> Path:
    """The compressed companion of a store file: ``hardware-v2.jsonl.gz``."""
    return path.with_name(path.name + ".gz")


def _read_rows(path: Path):
    """``(key, raw line, row)`` of each valid line of a plain or gzip store file; corrupt lines
    and a truncated compressed tail are skipped with a warning."""
    if not path.exists():
        return
    lineno = 0
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            for lineno, raw in enumerate(f, start=1):
                try:
                    obj = json.loads(raw)
                    row = np.asarray(obj["row"], dtype=np.float32)
                    config = json.dumps(obj["config"], sort_keys=True, separators=(",", ":"))
                    yield (str(obj["task"]), config), raw.rstrip(b"\n"), row
                except (ValueError, KeyError, TypeError) as err:
                    log.warning("%s:%d: skipping corrupt feature row: %s", path, lineno, err)
    except (EOFError, gzip.BadGzipFile) as err:
        log.warning("%s:%d: unreadable gzip data: %s", path, lineno + 1, err)


def pack_file(path: Path) -> int:
    """Merge the appended rows of ``path`` into its ``.gz`` companion (atomically: the plain
    file is removed only after the packed one is in place) and return the rows packed."""
    if not path.exists():
        return 0
    lines: dict[tuple[str, str], bytes] = {}
    for source in (packed(path), path):
        for key, raw, _ in _read_rows(source):
            lines[key] = raw
    out = packed(path)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0) as z:
            z.write(b"".join(raw + b"\n" for raw in lines.values()))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, out)
    path.unlink()
    return len(lines)


class FeatureStore:
    """A directory of stored feature rows, one file per extractor name and version; rows of the
    ``also`` directories are served too, and new rows are written to ``directory`` only."""

    def __init__(self, directory: str | os.PathLike, read_only: bool = False,
                 also: Sequence[str | os.PathLike] = ()):
        self.directory = Path(directory)
        self.read_only = read_only
        self.also = tuple(Path(d) for d in also)
        self._open: dict[str, StoredExtractor] = {}

    def path_for(self, extractor) -> Path:
        return self.directory / f"{extractor.name}-v{extractor.version}.jsonl"

    def wrap(self, extractor):
        """``extractor`` backed by this store (the same wrapper for every call with one name)."""
        if not isinstance(extractor, FeatureExtractor):
            raise TypeError(f"a feature store wraps a FeatureExtractor, not {type(extractor).__name__}")
        path = self.path_for(extractor)
        stored = self._open.get(str(path))
        if stored is None:
            stored = self._open[str(path)] = StoredExtractor(
                extractor, path, self.read_only, tuple(d / path.name for d in self.also))
        return stored

    def pack(self) -> dict[str, int]:
        """Compress every file's appended rows (``pack_file``); rows per packed file."""
        if self.read_only:
            raise ValueError(f"{self.directory}: a read-only feature store is not packed")
        return {p.name: pack_file(p) for p in sorted(self.directory.glob("*.jsonl"))}


def fill(store: FeatureStore, name: str, inputs: Sequence[MeasureInput], jobs: int = 1,
         chunk: int = 16, on_chunk: Callable[[int], None] | None = None,
         timeout_s: float | None = None) -> int:
    """Compute the rows of ``name`` the store lacks for ``inputs``; an extractor that compiles
    does it in ``jobs`` worker processes, each row within ``timeout_s`` (its default if None),
    appending each chunk
    (inputs of one task) as it completes. Returns the rows computed; ``on_chunk(n)`` is told
    each chunk's size."""
    from . import EXTRACTORS

    if name not in EXTRACTORS:
        raise ValueError(f"unknown feature extractor {name!r}; known: {', '.join(EXTRACTORS)}")
    cls = EXTRACTORS[name]
    # only extractors that compile take workers; the others are cheap enough in-process
    accepted = inspect.signature(cls).parameters
    options = {k: v for k, v in (("workers", max(1, jobs)), ("timeout_s", timeout_s))
               if k in accepted and v is not None}
    extractor = cls(**options)
    stored = store.wrap(extractor)  # an earlier wrapper of the store may hold another instance
    by_task: dict[str, list[MeasureInput]] = {}
    for inp in inputs:
        if inp not in stored:
            by_task.setdefault(inp.task.key, []).append(inp)
    chunks = [todo[i:i + chunk] for todo in by_task.values() for i in range(0, len(todo), chunk)]
    try:
        for c in chunks:
            stored.add(c, extractor.extract(c))
            if on_chunk is not None:
                on_chunk(len(c))
    finally:
        extractor.close()
    return sum(len(c) for c in chunks)


__all__ = ["FeatureStore", "StoredExtractor", "fill", "pack_file", "packed", "COSTLY"]
