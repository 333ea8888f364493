"""The service's engine: accepted jobs in SQLite, run as stage jobs by one ``StageScheduler``.

Every job shares the home's records (``records.jsonl``) and so starts from what all earlier
jobs measured; the scheduler interleaves the jobs' stages on the machine (load-aware by
default). A job found queued or running at start-up (the server was killed) is scheduled
again with the trials it has left; its tasks resume from the records.
"""
from __future__ import annotations

import collections
import dataclasses
import secrets
import shutil
import threading
import time
from pathlib import Path

from ..measure.rpc_runner import DeviceUnavailable
from ..orchestrate.devices import open_resources, why_none_serves
from ..orchestrate.scheduler import Job, StageScheduler
from ..settings import Settings
from ..tasks.claims import TaskClaims
from ..tuner.stages import BUILD, MEASURE, WAIT, counts_as_trials
from .index import RecordsIndex
from .job import ARTIFACT, MODEL_FILE, JobPlan, job_stages
from .store import LIVE, Store
from .upload import ModelInfo

DB_FILE = "service.db"


class JobNotFound(KeyError):
    pass


class TuningService:
    """Accepts jobs, runs them, answers for them. ``start`` before use, ``close`` after."""

    def __init__(self, settings: Settings, policy: str = "load-aware",
                 default_trials: int = 200, devices: str = "local", ray: bool = False,
                 ray_address: str | None = None):
        """``devices``, ``ray`` and ``ray_address`` as ``tensortune schedule``'s: where the
        jobs' candidates are built and timed."""
        self.settings = settings
        self.home = Path(settings.home)
        self.store = Store(self.home / DB_FILE)
        self.index = RecordsIndex(self.store, self.home / "records.jsonl")
        self.jobs_dir = self.home / "jobs"
        self.default_trials = default_trials
        layout, self.resources = open_resources(devices, settings, ray, ray_address)
        self.devices, self.ray = devices, bool(ray or ray_address)
        self.threads = layout.threads(settings.measure.threads)
        self.scheduler = StageScheduler(self.resources, policy, on_event=self._on_event)
        self.claims = TaskClaims()  # a task two running jobs share is tuned by one of them
        self.trials_total = 0  # measured since start, for ``/metrics``
        self._recent: collections.deque = collections.deque()  # (time, trials) of the last minute
        self._counting = threading.Lock()  # the scheduler's thread counts, HTTP threads read
        self._thread: threading.Thread | None = None
        self.started = time.time()

    # -- life ---------------------------------------------------------------------------------
    def start(self) -> None:
        self.index.sync()
        for job in self.store.jobs(LIVE):  # the server stopped (or was killed) under them
            self.store.update_job(job["id"], state="queued", current="",
                                  restarts=job["restarts"] + 1)
            self.store.add_event(job["id"], "resumed", {"trials_done": job["trials_done"]})
            self._schedule(self.store.job(job["id"]))
        self._thread = threading.Thread(target=self.scheduler.run, kwargs={"until_idle": False},
                                        name="scheduler", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.scheduler.stop()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self.resources.close()
        self.store.close()

    # -- requests -----------------------------------------------------------------------------
    def submit(self, data: bytes, info: ModelInfo, sla_ms: float | None, trials: int | None,
               target: str, target_dict: dict, hardware_free: bool) -> dict:
        """Accept a checked model; a job whose SLA an earlier artifact of the same model and
        target already meets is done at once (no trial, no compile)."""
        job_id = time.strftime("%Y%m%d%H%M%S-") + secrets.token_hex(4)
        job_dir = self.jobs_dir / job_id
        job_dir.mkdir(parents=True)
        tmp = job_dir / (MODEL_FILE + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(job_dir / MODEL_FILE)
        trials = self.default_trials if trials is None else trials
        if sla_ms is not None and not hardware_free:
            for earlier in self.store.done_with(info.sha256, target):
                if earlier["latency_ms"] <= sla_ms:
                    return self._shortcut(job_id, info, sla_ms, trials, target, earlier)
        self.store.add_job(job_id, info.name, info.sha256, sla_ms, trials, target, hardware_free)
        self.store.add_event(job_id, "accepted", {"inputs": info.inputs, "notes": info.notes,
                                                  "target_dict": target_dict,
                                                  "size": info.size})
        self._schedule(self.store.job(job_id))
        return self.store.job(job_id)

    def _shortcut(self, job_id, info, sla_ms, trials, target, earlier) -> dict:
        shutil.copyfile(self.jobs_dir / earlier["id"] / ARTIFACT, self.jobs_dir / job_id / ARTIFACT)
        self.store.add_job(job_id, info.name, info.sha256, sla_ms, trials, target, False,
                           state="done")
        self.store.update_job(job_id, latency_ms=earlier["latency_ms"], sla_met=True,
                              artifact=True, tasks=earlier["tasks"],
                              predicted_ms=earlier["predicted_ms"],
                              note=f"job {earlier['id']}'s module ({earlier['latency_ms']:.3f} "
                                   "ms) meets the SLA: no trial")
        self.store.add_event(job_id, "shortcut", {"from": earlier["id"]})
        return self.store.job(job_id)

    def cancel(self, job_id: str) -> None:
        job = self.get(job_id)
        if job["state"] in LIVE:
            self.store.update_job(job_id, state="cancelled", current="")
            self.scheduler.cancel(job_id)

    def get(self, job_id: str) -> dict:
        job = self.store.job(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    def view(self, job_id: str, curve: bool = True) -> dict:
        """The job as the API shows it: progress, per-task bests, the curve, errors."""
        job = self.get(job_id)
        done = job["state"] == "done"
        out = {k: job[k] for k in ("id", "state", "name", "sla_ms", "sla_met", "latency_ms",
                                   "predicted_ms", "trials", "trials_done", "target",
                                   "hardware_free", "tasks", "errors", "error", "note",
                                   "current", "restarts", "created", "updated")}
        out["progress"] = 1.0 if done else round(min(1.0, job["trials_done"] /
                                                     max(1, job["trials"])), 4)
        out["artifact"] = f"/v1/jobs/{job_id}/artifact" if job["artifact"] else None
        if curve:
            out["curve"] = [{"trials": e["trials"], "predicted_ms": e.get("predicted_ms"),
                             "latency_ms": e.get("latency_ms")}
                            for e in self.store.events(job_id) if e["kind"] in ("curve", "timed")]
        return out

    def events(self, job_id: str) -> list[dict]:
        """The job's events, oldest first: accepted, each build and measurement (where it
        ran), tasks left to another job (``shared``), the curve, the end."""
        self.get(job_id)
        return [{"t": e.pop("t"), "kind": e.pop("kind"), "data": e}
                for e in self.store.events(job_id)]

    def list(self) -> list[dict]:
        return [self.view(j["id"], curve=False) for j in reversed(self.store.jobs())]

    def artifact(self, job_id: str) -> Path | None:
        job = self.get(job_id)
        path = self.jobs_dir / job_id / ARTIFACT
        return path if job["artifact"] and path.exists() else None

    def health(self) -> dict:
        jobs = self.store.jobs()
        counts = {s: sum(j["state"] == s for j in jobs) for s in
                  ("queued", "running", "done", "failed", "cancelled")}
        return {"status": "ok", "uptime_s": round(time.time() - self.started, 1),
                "scheduler": self.scheduler.policy, "jobs": counts,
                "scheduler_alive": bool(self._thread and self._thread.is_alive())}

    def cluster(self) -> dict:
        """Where jobs run: the nodes builds go to, each device (busy, taken out, busy
        fraction), the CPU, the stages waiting by kind and the jobs by state."""
        return {"devices_spec": self.devices, "ray": self.ray, "nodes": self.resources.nodes(),
                **self.scheduler.snapshot()}

    def refusal(self, target: dict) -> str:
        """Why no device of the pool can time ``target``'s code ('' when one can)."""
        return why_none_serves(self.resources.devices, target)

    def trials_per_second(self, window_s: float = 60.0) -> float:
        """Measurements per second over the last ``window_s`` (or since start, if shorter)."""
        now = time.time()
        with self._counting:
            while self._recent and self._recent[0][0] < now - window_s:
                self._recent.popleft()
            recent = sum(n for _, n in self._recent)
        return recent / min(window_s, max(1e-9, now - self.started))

    # -- scheduling ---------------------------------------------------------------------------
    def _schedule(self, job: dict) -> None:
        accepted = self.store.events(job["id"], "accepted")
        info = accepted[0] if accepted else {}
        target = info.get("target_dict") or {}
        # a hardware-free job is timed at its end only where a device can run it
        timeable = not self.refusal(target)
        plan = JobPlan(job["id"], self.jobs_dir / job["id"], info.get("inputs") or {},
                       job["sla_ms"], max(0, job["trials"] - job["trials_done"]),
                       target, job["hardware_free"], timeable=timeable)
        settings = dataclasses.replace(
            self.settings, measure=dataclasses.replace(self.settings.measure,
                                                       threads=self.threads))
        done, claimant = job["trials_done"], self.claims.for_owner(job["id"])
        try:
            self.scheduler.submit(Job(job["id"], lambda: job_stages(plan, settings, self.index,
                                                                    self.store, done, claimant),
                                      target=target if timeable else None))
        except ValueError as err:  # resumed under a pool that can no longer time it
            self.store.update_job(job["id"], state="failed", current="", error=str(err))
            self.store.add_event(job["id"], "failed", {"error": str(err)})

    def _on_event(self, kind: str, job: Job, info) -> None:
        if kind == "start":
            if job.state == "cancelled":
                return
            self.store.update_job(job.name, state="running", current=job.current)
        elif kind == "end":
            if info.kind in (BUILD, MEASURE, WAIT) or info.error:  # where its work ran
                self.store.add_event(job.name, "stage", {
                    "stage": info.kind, "resource": info.resource, "size": info.size,
                    "task": info.task, "seconds": round(info.end - info.start, 3),
                    **({"nodes": list(info.nodes)} if info.nodes else {}),
                    **({"error": info.error} if info.error else {})})
            if info.error == DeviceUnavailable.__name__:  # taken out; the stage waits, uncharged
                why = next((d.down for d in self.resources.devices if d.name == info.resource), "")
                self.store.add_event(job.name, "device_down", {"device": info.resource,
                                                               "why": why[:500]})
            if counts_as_trials(info.kind, info.task) and not info.error:
                self.store.add_trials(job.name, info.size)
                with self._counting:
                    self.trials_total += info.size
                    self._recent.append((time.time(), info.size))
        elif kind == "done":
            self.claims.release(job.name)
            if self.store.job(job.name)["state"] != "cancelled":
                self.store.update_job(job.name, state="done", current="")
            self.store.add_event(job.name, "done", {})
        elif kind == "failed":
            self.claims.release(job.name)
            self.store.update_job(job.name, state="failed", current="", error=job.error[:2000])
            self.store.add_event(job.name, "failed", {"error": job.error[:2000]})
