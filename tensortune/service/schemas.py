"""The API's answers as typed models: what ``/openapi.json`` promises clients."""
from typing import Literal

from pydantic import BaseModel

State = Literal["queued", "running", "done", "failed", "cancelled"]


class JobCreated(BaseModel):
    id: str
    state: State
    name: str


class TaskView(BaseModel):
    name: str
    key: str
    weight: float
    trials: int
    best_us: float | None
    # where the best came from: tuned (this job), exact or family (the records index),
    # job <id> (tuned by another job at the same time), template seed (never measured), or none
    source: str | None = None


class CurvePoint(BaseModel):
    trials: int
    predicted_ms: float | None = None  # the kernels' best times plus what lies between
    latency_ms: float | None = None  # the whole model, timed


class JobEvent(BaseModel):
    t: float  # seconds since the epoch
    # accepted, stage (a build or measurement: data names its resource), shared (a task
    # another job tuned), curve, timed, resumed, shortcut, done, failed
    kind: str
    data: dict


class JobView(BaseModel):
    id: str
    state: State
    name: str
    sla_ms: float | None
    sla_met: bool | None
    latency_ms: float | None
    predicted_ms: float | None
    trials: int
    trials_done: int
    progress: float
    target: str
    hardware_free: bool
    tasks: list[TaskView]
    errors: dict[str, int]
    error: str
    note: str
    current: str
    restarts: int
    created: float
    updated: float
    artifact: str | None
    curve: list[CurvePoint] | None = None


class Health(BaseModel):
    status: str
    uptime_s: float
    scheduler: str
    scheduler_alive: bool
    jobs: dict[str, int]


class NodeView(BaseModel):
    name: str
    address: str
    cpus: int
    alive: bool
    driver: bool = False  # the node the service itself is attached to (its Ray driver)


class DeviceView(BaseModel):
    name: str
    busy: bool
    down: str | None  # why it was taken out, or None while in service
    busy_fraction: float  # of the time since the scheduler started


class CpuView(BaseModel):
    capacity: int
    free: int | None
    busy_fraction: float


class Cluster(BaseModel):
    devices_spec: str
    ray: bool
    policy: str
    seconds: float
    nodes: list[NodeView]
    devices: list[DeviceView]
    cpu: CpuView
    queue: dict[str, int]  # stages of running jobs waiting for a resource, by kind
    jobs: dict[str, int]  # the scheduler's jobs by state
