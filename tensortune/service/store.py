"""The service's state in SQLite (WAL mode): jobs, their events, and the records index.

One connection, shared by the HTTP threads and the scheduler's, behind a lock: SQLite
serializes writers anyway, and every statement here is short. Each write commits at once, so
a ``kill -9`` of the server loses nothing it has answered for.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

from ..records import steadiest

SCHEMA_VERSION = 1
STATES = ("queued", "running", "done", "failed", "cancelled")
LIVE = ("queued", "running")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    name TEXT NOT NULL,
    model_sha256 TEXT NOT NULL,
    sla_ms REAL,
    trials INTEGER NOT NULL,
    target TEXT NOT NULL,          -- the target as the client named it ("host", "llvm:znver4")
    hardware_free INTEGER NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    trials_done INTEGER NOT NULL DEFAULT 0,
    latency_ms REAL,
    predicted_ms REAL,
    sla_met INTEGER,
    tasks TEXT NOT NULL DEFAULT '[]',
    errors TEXT NOT NULL DEFAULT '{}',
    error TEXT NOT NULL DEFAULT '',
    note TEXT NOT NULL DEFAULT '',
    current TEXT NOT NULL DEFAULT '',
    artifact INTEGER NOT NULL DEFAULT 0,
    restarts INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    t REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events (job_id, seq);
CREATE TABLE IF NOT EXISTS records_index (
    task_key TEXT PRIMARY KEY,     -- exact: workload, target, template, TVM
    family TEXT NOT NULL,          -- workload, template, TVM, the target's kind and ISA
    cost REAL NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS records_family ON records_index (family, cost);
CREATE TABLE IF NOT EXISTS confirmations (  -- confirming timings (tasks.confirm)
    task_key TEXT NOT NULL,
    config TEXT NOT NULL,          -- the config as canonical JSON
    cost REAL NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS confirmations_task ON confirmations (task_key, config);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_JSON_FIELDS = ("tasks", "errors")
_UPDATABLE = {"state", "trials_done", "latency_ms", "predicted_ms", "sla_met", "tasks", "errors",
              "error", "note", "current", "artifact", "restarts"}


class Store:
    """Jobs, events and the records index of one service home."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                                   timeout=30.0)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # durable against process death
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise RuntimeError(f"{self.path}: database schema {version}, this tensortune "
                                   f"reads {SCHEMA_VERSION}")
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- jobs ---------------------------------------------------------------------------------
    def add_job(self, job_id: str, name: str, model_sha256: str, sla_ms: float | None,
                trials: int, target: str, hardware_free: bool, state: str = "queued") -> dict:
        now = time.time()
        with self._lock:
            self._db.execute(
                "INSERT INTO jobs (id, state, name, model_sha256, sla_ms, trials, target, "
                "hardware_free, created, updated) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (job_id, state, name, model_sha256, sla_ms, trials, target, int(hardware_free),
                 now, now))
        return self.job(job_id)

    def update_job(self, job_id: str, **fields) -> None:
        bad = set(fields) - _UPDATABLE
        if bad:
            raise KeyError(f"not updatable: {', '.join(sorted(bad))}")
        for key in _JSON_FIELDS:
            if key in fields:
                fields[key] = json.dumps(fields[key])
        if "sla_met" in fields and fields["sla_met"] is not None:
            fields["sla_met"] = int(bool(fields["sla_met"]))
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._lock:
            self._db.execute(f"UPDATE jobs SET {cols}, updated = ? WHERE id = ?",
                             (*fields.values(), time.time(), job_id))

    def add_trials(self, job_id: str, n: int) -> None:
        with self._lock:
            self._db.execute("UPDATE jobs SET trials_done = trials_done + ?, updated = ? "
                             "WHERE id = ?", (n, time.time(), job_id))

    def job(self, job_id: str) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else _job(row)

    def jobs(self, states: tuple[str, ...] | None = None) -> list[dict]:
        """Jobs, oldest first (only those in ``states`` when given)."""
        query, args = "SELECT * FROM jobs", ()
        if states:
            query += f" WHERE state IN ({','.join('?' * len(states))})"
            args = tuple(states)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY created, id", args).fetchall()
        return [_job(r) for r in rows]

    def done_with(self, model_sha256: str, target: str) -> list[dict]:
        """Finished jobs of the same model and target with an artifact, fastest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM jobs WHERE model_sha256 = ? AND target = ? AND state = 'done' "
                "AND artifact = 1 AND latency_ms IS NOT NULL ORDER BY latency_ms",
                (model_sha256, target)).fetchall()
        return [_job(r) for r in rows]

    # -- events -------------------------------------------------------------------------------
    def add_event(self, job_id: str, kind: str, data: dict) -> None:
        with self._lock:
            self._db.execute("INSERT INTO events (job_id, t, kind, data) VALUES (?,?,?,?)",
                             (job_id, time.time(), kind, json.dumps(data)))

    def events(self, job_id: str, kind: str | None = None) -> list[dict]:
        query, args = "SELECT * FROM events WHERE job_id = ?", [job_id]
        if kind:
            query += " AND kind = ?"
            args.append(kind)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY seq", args).fetchall()
        return [{"t": r["t"], "kind": r["kind"], **json.loads(r["data"])} for r in rows]

    # -- the records index and small values ----------------------------------------------------
    def put_best(self, task_key: str, family: str, cost: float, record: dict) -> None:
        """Keep ``record`` as its task's best if it is faster than the one held."""
        with self._lock:
            self._db.execute(
                "INSERT INTO records_index (task_key, family, cost, record) VALUES (?,?,?,?) "
                "ON CONFLICT(task_key) DO UPDATE SET cost = excluded.cost, "
                "record = excluded.record WHERE excluded.cost < records_index.cost",
                (task_key, family, cost, json.dumps(record)))

    def put_confirmation(self, task_key: str, config: str, cost: float, record: dict) -> None:
        """Add one confirming timing of ``config`` (canonical JSON) of a task."""
        with self._lock:
            self._db.execute("INSERT INTO confirmations (task_key, config, cost, record) "
                             "VALUES (?,?,?,?)", (task_key, config, cost, json.dumps(record)))

    def best_confirmed(self, task_key: str) -> tuple[float, dict] | None:
        """The median confirming timing of the task's config whose confirming timings have
        the lowest median (``records.best_record``'s rule), with its record; None without."""
        with self._lock:
            rows = self._db.execute("SELECT config, cost, record FROM confirmations WHERE "
                                    "task_key = ? ORDER BY config, cost", (task_key,)).fetchall()
        groups: dict[str, list] = {}
        for row in rows:
            groups.setdefault(row["config"], []).append(row)
        if not groups:
            return None
        middle = steadiest(groups.values(), lambda r: r["cost"])
        return middle["cost"], json.loads(middle["record"])

    def best_exact(self, task_key: str) -> tuple[float, dict] | None:
        with self._lock:
            row = self._db.execute("SELECT cost, record FROM records_index WHERE task_key = ?",
                                   (task_key,)).fetchone()
        return None if row is None else (row["cost"], json.loads(row["record"]))

    def best_family(self, family: str) -> tuple[float, dict] | None:
        with self._lock:
            row = self._db.execute("SELECT cost, record FROM records_index WHERE family = ? "
                                   "ORDER BY cost LIMIT 1", (family,)).fetchone()
        return None if row is None else (row["cost"], json.loads(row["record"]))

    def get_meta(self, key: str, default: str = "") -> str:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else row["value"]

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) "
                             "DO UPDATE SET value = excluded.value", (key, value))


def _job(row: sqlite3.Row) -> dict:
    job = dict(row)
    for key in _JSON_FIELDS:
        job[key] = json.loads(job[key])
    job["hardware_free"] = bool(job["hardware_free"])
    job["artifact"] = bool(job["artifact"])
    job["sla_met"] = None if job["sla_met"] is None else bool(job["sla_met"])
    return job
