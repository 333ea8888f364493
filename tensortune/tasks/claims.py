"""Which job tunes which task now: the tasks that several running jobs share are tuned once.

A service's jobs share one records file, so a task two models have in common (the same
workload on the same target) needs tuning once. ``TaskClaims`` is the ledger: a job's task
scheduler claims the tasks it is about to tune; a task another live job holds is left to that
job (the second job spends its budget on its other tasks), and the second job waits for the
holder to let go before it builds, then takes the result from the records. A job lets go of
its tasks when its schedule ends, however it ends (done, failed, cancelled).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterable


SHARED = "tuned by job "  # a task scheduler's reason for a task left to its holder


class TaskClaims:
    """The ledger of one service (thread-safe)."""

    def __init__(self):
        self._held: dict[str, str] = {}  # task key -> the job tuning it
        self._changed = threading.Condition()

    def claim(self, key: str, owner: str) -> str:
        """Take ``key`` for ``owner``; returns the other job that holds it ('' when taken)."""
        with self._changed:
            holder = self._held.setdefault(key, owner)
            return "" if holder == owner else holder

    def release(self, owner: str, keys: Iterable[str] | None = None) -> None:
        """Let go of ``owner``'s ``keys`` (all of its tasks when None)."""
        with self._changed:
            for key in list(self._held) if keys is None else keys:
                if self._held.get(key) == owner:
                    del self._held[key]
            self._changed.notify_all()

    def holders(self, keys: Iterable[str], owner: str = "") -> dict[str, str]:
        """The keys of ``keys`` held by jobs other than ``owner``, with their holders."""
        with self._changed:
            return {k: self._held[k] for k in keys if self._held.get(k, owner) != owner}

    def wait(self, keys: Iterable[str], owner: str = "", timeout_s: float | None = None) -> bool:
        """Block until no other job than ``owner`` holds any of ``keys``; False on timeout."""
        keys = list(keys)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            while any(self._held.get(k, owner) != owner for k in keys):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def for_owner(self, owner: str) -> "Claimant":
        return Claimant(self, owner)


class Claimant:
    """One job's side of the ledger: what its task scheduler is handed."""

    def __init__(self, claims: TaskClaims, owner: str):
        self.claims, self.owner = claims, owner

    def claim(self, key: str) -> str:
        """Take ``key``; the job that holds it instead ('' when taken)."""
        return self.claims.claim(key, self.owner)

    def release(self, keys: Iterable[str] | None = None) -> None:
        self.claims.release(self.owner, keys)

    def wait(self, keys: Iterable[str], timeout_s: float | None = None) -> bool:
        """Until no other job holds any of ``keys``; False on timeout."""
        return self.claims.wait(keys, self.owner, timeout_s)
