"""Tuning records: an append-only JSON-lines log, one line per measurement (schema version 1).

Each line holds everything needed to rebuild the measured kernel without the tuner: the
workload, target, template, TVM version and config, plus the outcome (costs or error).
Lines are written with one ``write`` and an ``fsync`` so a killed run loses at most the line
being written; a torn or otherwise corrupt line is reported and skipped when loading.
A finished log may be gzip-compressed (``pack_records``, e.g. a dataset kept in the repository);
``load_records`` reads ``.gz`` files as they are, and logs are only ever appended to uncompressed.
A record keeps an error's first line; its full text (a build's traceback, a compiler's output)
goes to ``errors.log`` beside the log (``errors_path``).
"""
from __future__ import annotations

import dataclasses

import gzip
import json
import logging
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .measure.types import ErrorKind, MeasureInput, MeasureResult
from .space import Config
from .workload import Task, Workload, WorkloadError, workload_from_dict
from .workload.task import tvm_version

SCHEMA_VERSION = 1
MESSAGE_MAX = 4000  # compiler tracebacks can be huge; the head says what went wrong
FIELDS = ("v", "task", "workload", "workload_key", "target", "template", "tvm", "config", "costs",
          "error", "message", "build_s", "run_s", "verified", "ts")

log = logging.getLogger(__name__)


class RecordError(ValueError):
    """A record line that cannot be decoded (the message says why)."""


@dataclass(frozen=True)
class Record:
    """One decoded record line."""

    task_key: str
    workload: Workload
    target: dict = field(hash=False)
    template: str
    tvm: str
    config: Config
    costs: tuple[float, ...]
    error: ErrorKind
    message: str
    build_s: float
    run_s: float
    verified: bool
    ts: float
    device: str = "local"  # where it was timed: "local" or an RPC device's name
    # a confirming timing of a config measured before (``tasks.confirm``): a task that has
    # them is ranked by their median alone (``best_record``)
    confirm: bool = False

    @staticmethod
    def from_measure(inp: MeasureInput, res: MeasureResult, confirm: bool = False) -> "Record":
        """The record of one measurement; a result without timestamp is stamped now."""
        return Record(
            task_key=inp.task.key, workload=inp.task.workload, target=dict(inp.task.target),
            template=inp.task.template, tvm=tvm_version(), config=inp.config,
            costs=tuple(float(c) for c in res.costs), error=ErrorKind(res.error),
            message=res.message[:MESSAGE_MAX], build_s=float(res.build_s), run_s=float(res.run_s),
            verified=bool(res.verified), ts=float(res.timestamp or time.time()),
            device=res.device or "local", confirm=confirm)

    def to_json(self) -> dict:
        extra = {"confirm": True} if self.confirm else {}  # older readers never see the key
        return {
            "v": SCHEMA_VERSION, "task": self.task_key, "workload": self.workload.to_dict(),
            "workload_key": self.workload.key, "target": self.target, "template": self.template,
            "tvm": self.tvm, "config": self.config.to_json(), "costs": list(self.costs),
            "error": self.error.value, "message": self.message, "build_s": self.build_s,
            "run_s": self.run_s, "verified": self.verified, "ts": self.ts, "device": self.device,
            **extra,
        }

    @staticmethod
    def from_json(obj) -> "Record":
        """Decode one parsed line; raises ``RecordError`` naming the first problem found."""
        if not isinstance(obj, dict):
            raise RecordError(f"expected a JSON object, got {type(obj).__name__}")
        if obj.get("v") != SCHEMA_VERSION:
            raise RecordError(f"schema version {obj.get('v')!r}, expected {SCHEMA_VERSION}")
        missing = [f for f in FIELDS if f not in obj]
        if missing:
            raise RecordError(f"missing field(s) {', '.join(missing)}")
        try:
            workload = workload_from_dict(_typed(obj, "workload", dict))
        except (WorkloadError, TypeError) as err:
            raise RecordError(f"bad workload: {err}") from err
        if workload.key != obj["workload_key"]:
            raise RecordError(f"workload_key {obj['workload_key']!r} does not match the workload "
                              f"({workload.key})")
        try:
            error = ErrorKind(obj["error"])
        except ValueError:
            raise RecordError(f"unknown error kind {obj['error']!r}") from None
        costs = _typed(obj, "costs", list)
        if not all(_is_number(c) and c >= 0 and math.isfinite(c) for c in costs):
            raise RecordError(f"costs must be finite non-negative numbers, got {costs!r}")
        return Record(
            task_key=_typed(obj, "task", str), workload=workload, target=_typed(obj, "target", dict),
            template=_typed(obj, "template", str), tvm=_typed(obj, "tvm", str),
            config=Config.from_json(_typed(obj, "config", dict)),
            costs=tuple(float(c) for c in costs), error=error, message=_typed(obj, "message", str),
            build_s=float(_number(obj, "build_s")), run_s=float(_number(obj, "run_s")),
            verified=_typed(obj, "verified", bool), ts=float(_number(obj, "ts")),
            device=_typed(obj, "device", str) if "device" in obj else "local",
            confirm=_typed(obj, "confirm", bool) if "confirm" in obj else False)

    @property
    def ok(self) -> bool:
        return self.error is ErrorKind.NONE and bool(self.costs)

    @property
    def cost(self) -> float:
        """The ranking cost (median repeat, seconds), as ``MeasureResult.cost``."""
        return self.to_result().cost

    def to_task(self) -> Task:
        return Task(self.workload, dict(self.target), self.template)

    def to_input(self) -> MeasureInput:
        return MeasureInput(self.to_task(), self.config)

    def to_result(self) -> MeasureResult:
        return MeasureResult(costs=self.costs, error=self.error, message=self.message,
                             build_s=self.build_s, run_s=self.run_s, verified=self.verified,
                             timestamp=self.ts, device="" if self.device == "local" else self.device)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _number(obj: dict, name: str):
    v = obj[name]
    if not _is_number(v):
        raise RecordError(f"field {name!r} must be a number, got {v!r}")
    return v


def _typed(obj: dict, name: str, kind: type):
    v = obj[name]
    if not isinstance(v, kind):
        raise RecordError(f"field {name!r} must be {kind.__name__}, got {type(v).__name__}")
    return v


def errors_path(path: str | os.PathLike) -> Path:
    """Where the full error texts of the records log ``path`` go: ``errors.log`` beside a run's
    ``log.jsonl``, ``<stem>.errors.log`` beside any other log (logs can share a directory)."""
    path = Path(path)
    return path.with_name("errors.log" if path.name == "log.jsonl" else f"{path.stem}.errors.log")


class RecordWriter:
    """Appends records to a JSON-lines file; every line is flushed to disk before returning.

    Each measurement is logged at debug level (``--verbose``), and a failure's full text
    (``MeasureResult.detail``) is appended to ``errors_path(path)``, made on the first one.
    ``copy`` marks a writer of measurements another writer records too (a session's shared
    records file): it writes the records only.
    """

    def __init__(self, path: str | os.PathLike, copy: bool = False):
        self.path = Path(path)
        if self.path.suffix == ".gz":
            raise ValueError(f"{self.path}: records are appended to an uncompressed log; "
                             "decompress it, append, and pack it again")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.copy = copy
        self.trials = 0
        # O_APPEND and one write per line: a second writer (or a resumed run) never
        # interleaves inside a line, and nothing already in the file is touched.
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, inp: MeasureInput, res: MeasureResult, confirm: bool = False) -> Record:
        """Write one measurement (``confirm``: a confirming timing) and return its record."""
        record = Record.from_measure(inp, res, confirm)
        self.write(record)
        if not self.copy:
            self.trials += 1
            if log.isEnabledFor(logging.DEBUG):
                log.debug("trial %d: %s %s: %s", self.trials, inp.task.workload.describe(),
                          inp.config.to_json(), _outcome(res))
            if res.detail and not res.ok:
                self._write_error(inp, res)
        return record

    def _write_error(self, inp: MeasureInput, res: MeasureResult) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(res.timestamp or time.time()))
        head = (f"==== {stamp} {ErrorKind(res.error).value}: {inp.task.workload.describe()} "
                f"(task {inp.task.key}, template {inp.task.template})\n"
                f"config: {json.dumps(inp.config.to_json(), separators=(',', ':'))}\n")
        with open(errors_path(self.path), "a") as f:  # one write per failure, like the log
            f.write(head + res.detail.rstrip() + "\n\n")

    def write(self, record: Record) -> None:
        if self._fd is None:
            raise ValueError(f"record writer for {self.path} is closed")
        data = (json.dumps(record.to_json(), separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _outcome(res: MeasureResult) -> str:
    """One trial's result for the debug log: its time, or its error and first line."""
    if res.ok:
        return f"{res.cost * 1e6:.2f} us" + (" (verified)" if res.verified else "")
    return f"{ErrorKind(res.error).value} {res.message}".rstrip()


def load_records(path: str | os.PathLike,
                 on_corrupt: Callable[[int, str], None] | None = None) -> list[Record]:
    """All decodable records of ``path`` in file order.

    A corrupt line is logged as a warning, passed to ``on_corrupt(lineno, reason)`` (1-based)
    and skipped; blank lines are ignored. A missing file raises ``FileNotFoundError``.
    """
    records = []
    lineno = 0
    with (gzip.open(path, "rb") if Path(path).suffix == ".gz" else open(path, "rb")) as f:
        try:
            for lineno, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    records.append(Record.from_json(json.loads(raw)))
                except (json.JSONDecodeError, UnicodeDecodeError) as err:
                    _report(path, lineno, f"invalid JSON: {err}", on_corrupt)
                except RecordError as err:
                    _report(path, lineno, str(err), on_corrupt)
        except (EOFError, gzip.BadGzipFile) as err:  # a truncated or damaged compressed log
            _report(path, lineno + 1, f"unreadable gzip data: {err}", on_corrupt)
    return records


def pack_records(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Write ``src`` gzip-compressed to ``dst`` (atomically: a reader never sees half a file).
    Records of model tasks repeat their TVMScript on every line, so this shrinks them ~50x."""
    return _rewrite(open(src, "rb"), dst, lambda tmp: gzip.open(tmp, "wb", compresslevel=9))


def unpack_records(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Decompress the packed log ``src`` into ``dst`` (atomically), to append to it."""
    return _rewrite(gzip.open(src, "rb"), dst, lambda tmp: open(tmp, "wb"))


def _rewrite(fin, dst: str | os.PathLike, open_out) -> Path:
    """Copy the open stream ``fin`` into ``open_out(tmp)``, then move tmp over ``dst``."""
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".tmp")
    with fin, open_out(tmp) as fout:
        while chunk := fin.read(1 << 20):
            fout.write(chunk)
    os.replace(tmp, dst)
    return dst


def _report(path, lineno: int, reason: str, on_corrupt) -> None:
    log.warning("%s:%d: skipping corrupt record: %s", path, lineno, reason)
    if on_corrupt is not None:
        on_corrupt(lineno, reason)


def records_for(records: Iterable[Record], task: Task) -> list[Record]:
    """The records of ``task``: same workload, target, template and TVM version; a record of
    a structurally equal function whose parameters have other names (another model's copy)
    comes with its config in ``task``'s names (``in_names_of``)."""
    key = task.key
    return [in_names_of(r, task) for r in records if r.task_key == key]


def in_names_of(record: Record, task: Task) -> Record:
    """``record`` with the knobs named after its function's parameters (``pack_lv15``)
    renamed after ``task``'s (``pack_lv19``): template knobs name buffers, task keys do not."""
    old, new = record.workload.param_names, task.workload.param_names
    if not old or not new or old == new or len(old) != len(new):
        return record
    # longest names first, so a knob of buffer ``x_1`` is not taken for one of buffer ``1``
    rename = sorted(((a, b) for a, b in zip(old, new) if a != b), key=lambda ab: -len(ab[0]))
    values = {}
    for knob, value in record.config.items():
        name = next((knob[: -len(a)] + b for a, b in rename if knob.endswith("_" + a)), knob)
        values[name] = value
    return dataclasses.replace(record, workload=task.workload, config=Config(values))


def measured_configs(records: Iterable[Record], task: Task) -> set[Config]:
    """Configs of ``task`` already measured, failures included (a resumed run skips them all)."""
    return {r.config for r in records_for(records, task)}


def best_record(records: Iterable[Record], task: Task) -> Record | None:
    """The error-free record of ``task`` with the lowest cost (the first one on ties); where
    ``task`` has confirming records, the median one of the config whose confirming timings
    have the lowest median."""
    ok = [r for r in records_for(records, task) if r.ok]
    confirmed: dict[Config, list[Record]] = {}
    for r in ok:
        if r.confirm:
            confirmed.setdefault(r.config, []).append(r)
    if confirmed:
        return steadiest(confirmed.values(), lambda r: r.cost)
    return min(ok, key=lambda r: r.cost) if ok else None


def steadiest(groups, cost):
    """Of ``groups`` (each one config's confirming timings), the median timing of the group
    whose median ``cost`` is lowest: the confirmation's rule, for the records and the index."""
    group = sorted(min(groups, key=lambda g: statistics.median(cost(x) for x in g)), key=cost)
    return group[(len(group) - 1) // 2]


def best_from_log(path: str | os.PathLike, task: Task) -> Record | None:
    return best_record(load_records(path), task)


def build_best(path: str | os.PathLike, task: Task):
    """Compile the best config of ``task`` found in ``path``.

    Returns ``(module, config, record)``; ``module["main"](*tvm_tensors)`` runs the kernel.
    Raises ``LookupError`` when the log has no error-free record of the task.
    """
    import tvm

    from .space import apply_config

    record = best_from_log(path, task)
    if record is None:
        raise LookupError(f"{path}: no error-free record of {task.workload.describe()} "
                          f"(task {task.key}, template {task.template}, TVM {tvm_version()})")
    sch = apply_config(task, record.config)
    module = tvm.compile(sch.mod, target=task.tvm_target()).jit()
    return module, record.config, record
