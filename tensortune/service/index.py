"""The records index: each task's best record, looked up by exact target, then by family.

Confirming timings (``tasks.confirm``) are kept apart; a task that has them is served the
config whose confirming timings have the lowest median, as ``records.best_record`` picks it.

The records file (``records.jsonl``, append only) stays the truth; the index follows it from
the byte offset it reached last (``sync``), so a crash between the two loses nothing: the
next sync reads the lines it missed. A task's *family* is its workload, template and TVM
version on a target of the same kind and ISA (``llvm/avx512``, ``cuda/sm_90``): MetaSchedule's
database ignores the target altogether, which serves a config compiled for one ISA to
another; exact matches come first, a family match only where there is none.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..records import Record, RecordError, in_names_of
from ..space import Config, task_space
from ..workload.task import Task, tvm_version, vector_lanes
from .store import Store

OFFSET_KEY = "records_offset"


def isa_key(target: dict) -> str:
    """A target's kind and ISA: ``llvm/avx512``, ``llvm/avx2``, ``cuda/sm_90``."""
    kind = target.get("kind", "?")
    if kind == "cuda":
        return f"cuda/{target.get('arch', '?')}"
    if kind == "llvm":
        if not target.get("mcpu"):
            return "llvm/generic"
        return "llvm/avx512" if vector_lanes(target) == 16 else "llvm/avx2"
    return str(kind)


def family_key(workload_key: str, template: str, tvm: str, target: dict) -> str:
    blob = "|".join([workload_key, template, tvm, isa_key(target)])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Best:
    """A task's best known config, its cost (seconds) and how it was found (exact, family)."""

    config: Config
    cost: float
    match: str


class RecordsIndex:
    """Each task's fastest error-free record of ``records`` (a JSON-lines file), in ``store``."""

    def __init__(self, store: Store, records: Path):
        self.store = store
        self.records = Path(records)

    def sync(self) -> int:
        """Index the lines appended since the last sync; returns how many were read."""
        if not self.records.exists():
            return 0
        offset = int(self.store.get_meta(OFFSET_KEY, "0"))
        if offset > self.records.stat().st_size:  # the file was replaced: start over
            offset = 0
        count = 0
        with open(self.records, "rb") as f:
            f.seek(offset)
            while True:
                line = f.readline()
                if not line.endswith(b"\n"):  # end of file, or a line being written
                    break
                offset += len(line)
                count += 1
                self._add(line)
        self.store.set_meta(OFFSET_KEY, str(offset))
        return count

    def _add(self, line: bytes) -> None:
        try:
            obj = json.loads(line)
            record = Record.from_json(obj)
        except (json.JSONDecodeError, UnicodeDecodeError, RecordError):
            return  # the tuner's loader reports corrupt lines; the index skips them
        if not record.ok:
            return
        if record.confirm:  # ranks its task's configs where it has such timings
            self.store.put_confirmation(record.task_key, json.dumps(record.config.to_json(),
                                                                    sort_keys=True),
                                        record.cost, obj)
            return
        family = family_key(record.workload.key, record.template, record.tvm, record.target)
        self.store.put_best(record.task_key, family, record.cost, obj)

    def best(self, task: Task) -> Best | None:
        """``task``'s best known config: its own records' (the steadiest of its confirmed
        configs where it has confirming timings), else its family's fastest."""
        found = self.store.best_confirmed(task.key) or self.store.best_exact(task.key)
        match = "exact"
        if found is None:
            found = self.store.best_family(family_key(task.workload.key, task.template,
                                                      tvm_version(), task.target))
            match = "family"
        if found is None:
            return None
        cost, obj = found
        record = in_names_of(Record.from_json(obj), task)
        if match == "family" and record.config not in task_space(task):
            return None  # another target's space (other vector lanes or cores)
        return Best(record.config, cost, match)

    def best_configs(self, tasks) -> dict[str, Best]:
        """The best known config of each task that has one, by task key."""
        out = {}
        for task in tasks:
            best = self.best(task)
            if best is not None:
                out[task.key] = best
        return out
