"""The HTTP API (FastAPI): jobs in, tuned modules out; a dashboard at ``/``.

Every route but ``/v1/health`` and the page itself needs ``Authorization: Bearer <token>``
(``/metrics`` too: a Prometheus scrape config sets it as ``authorization: credentials``).
A model is read as bytes and checked as data (``upload.check_model``); nothing a client sends
is unpickled or executed.
"""
import secrets
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, File, Form, HTTPException, Request, UploadFile
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..settings import Settings
from .engine import JobNotFound, TuningService
from .limits import BodyLimit
from .metrics import registry_for
from .schemas import Cluster, Health, JobCreated, JobEvent, JobView
from .upload import UploadError, UploadTooLarge, check_model

MAX_TRIALS = 100_000


@dataclass(frozen=True)
class ServiceConfig:
    """How the server runs: its tokens, the upload limit, the scheduler's policy."""

    tokens: tuple[str, ...]
    max_upload_mb: float = 200.0
    policy: str = "load-aware"
    default_trials: int = 200
    devices: str = "local"  # as ``tensortune schedule --devices``
    ray: bool = False
    ray_address: str | None = None


def load_tokens(path: Path) -> tuple[str, ...]:
    """The tokens of a token file: one per line; blank lines and ``#`` comments ignored."""
    lines = [ln.strip() for ln in Path(path).read_text().splitlines()]
    tokens = tuple(ln for ln in lines if ln and not ln.startswith("#"))
    if not tokens:
        raise ValueError(f"{path} holds no token")
    if any(len(t) < 16 for t in tokens):
        raise ValueError(f"{path}: a token shorter than 16 characters is too easy to guess")
    return tokens


def ensure_token_file(path: Path) -> Path:
    """Create ``path`` with one random token (readable by its owner only) if it is missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(32) + "\n")
    return path


def create_app(settings: Settings, config: ServiceConfig) -> FastAPI:
    """The application; its ``TuningService`` starts and stops with it."""
    limit = int(config.max_upload_mb * 2**20)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        from ..frontend.onnx_import import unsupported_ops  # noqa: F401  (import TVM once)

        service = TuningService(settings, config.policy, config.default_trials, config.devices,
                                config.ray, config.ray_address)
        service.start()
        app.state.service = service
        app.state.metrics = registry_for(service)
        try:
            yield
        finally:
            await run_in_threadpool(service.close)

    app = FastAPI(title="tensortune", version="1", lifespan=lifespan,
                  description="Autotuning as a service: submit an ONNX model and a latency "
                              "target, get back a tuned module.")
    app.add_middleware(BodyLimit, max_bytes=limit + 2**20, paths=("/v1/jobs",))
    bearer = HTTPBearer(auto_error=False)

    def authorized(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]):
        given = creds.credentials.encode() if creds and creds.scheme.lower() == "bearer" else b""
        ok = False
        for token in config.tokens:  # every token compared, each in constant time
            ok |= secrets.compare_digest(given, token.encode())
        if not ok:
            raise HTTPException(401, "a valid 'Authorization: Bearer <token>' header is needed",
                                headers={"WWW-Authenticate": "Bearer"})

    def service(request: Request) -> TuningService:
        return request.app.state.service

    auth = [Depends(authorized)]
    Service = Annotated[TuningService, Depends(service)]
    errors = {401: {"description": "no or a wrong token"}, 404: {"description": "no such job"}}

    @app.exception_handler(JobNotFound)
    async def not_found(request: Request, exc: JobNotFound):
        return JSONResponse({"detail": f"no job {exc.args[0]!r}"}, status_code=404)

    @app.get("/v1/health")
    def health(svc: Service) -> Health:
        """Liveness and job counts; needs no token."""
        return svc.health()

    @app.post("/v1/jobs", status_code=201, dependencies=auth,
              responses={**errors, 400: {"description": "not an ONNX model, or not importable"},
                         413: {"description": "the model is over the upload limit"}})
    async def submit(svc: Service, model: Annotated[UploadFile, File(description="an .onnx file")],
                     sla_ms: Annotated[float | None, Form(gt=0, le=1e7, allow_inf_nan=False)] = None,
                     trials: Annotated[int | None, Form(ge=0, le=MAX_TRIALS)] = None,
                     target: Annotated[str, Form(max_length=64)] = "host",
                     hardware_free: Annotated[bool, Form()] = False) -> JobCreated:
        """Submit a model: ``201 {"id", "state"}``; ``state`` is ``done`` at once when an
        earlier tuned module of the same model already meets ``sla_ms``."""
        target_dict = await run_in_threadpool(_target, svc, target, hardware_free)
        data = await model.read(limit + 1)
        try:
            info = await run_in_threadpool(check_model, data, model.filename or "", limit)
        except UploadTooLarge as err:
            raise HTTPException(413, str(err)) from None
        except UploadError as err:
            raise HTTPException(400, str(err)) from None
        job = await run_in_threadpool(svc.submit, data, info, sla_ms, trials, target,
                                      target_dict, hardware_free)
        return JobCreated(id=job["id"], state=job["state"], name=job["name"])

    @app.get("/v1/jobs", dependencies=auth, responses=errors)
    def list_jobs(svc: Service) -> list[JobView]:
        """Every job, newest first (without curves)."""
        return svc.list()

    @app.get("/v1/jobs/{job_id}", dependencies=auth, responses=errors)
    def get_job(job_id: str, svc: Service) -> JobView:
        """A job: state, progress, per-task bests, latency, SLA, errors by kind, curve."""
        return svc.view(job_id)

    @app.get("/v1/jobs/{job_id}/events", dependencies=auth, responses=errors)
    def job_events(job_id: str, svc: Service) -> list[JobEvent]:
        """The job's events, oldest first: where each build and measurement ran, the tasks
        another job tuned for it (``shared``), the curve, the end."""
        return svc.events(job_id)

    @app.delete("/v1/jobs/{job_id}", dependencies=auth, responses=errors)
    def cancel_job(job_id: str, svc: Service) -> JobView:
        """Cancel a queued or running job (a finished one is left as it is)."""
        svc.cancel(job_id)
        return svc.view(job_id)

    @app.get("/v1/jobs/{job_id}/artifact", dependencies=auth, response_class=FileResponse,
             responses={**errors, 200: {"content": {"application/gzip": {}},
                                        "description": "module, MetaSchedule database, run.json"},
                        409: {"description": "the job has no artifact (yet)"}})
    def artifact(job_id: str, svc: Service):
        """The tuned module as a tar.gz."""
        path = svc.artifact(job_id)
        if path is None:
            state = svc.get(job_id)["state"]
            raise HTTPException(409, f"job {job_id} has no artifact (it is {state})")
        return FileResponse(path, media_type="application/gzip",
                            filename=f"tensortune-{job_id}.tar.gz")

    @app.get("/v1/cluster", dependencies=auth, responses=errors)
    def cluster(svc: Service) -> Cluster:
        """Where the jobs run: nodes, devices (busy, taken out, busy fraction), the build
        CPU, the stages waiting for a resource and the jobs by state."""
        return svc.cluster()

    @app.get("/metrics", dependencies=auth, response_class=PlainTextResponse,
             responses={**errors, 200: {"content": {CONTENT_TYPE_LATEST: {}}}})
    def metrics(request: Request):
        """Prometheus' text format: jobs by state, trials (total, per second), each device's
        busy fraction and state, the build CPU's busy fraction, stages waiting."""
        return PlainTextResponse(generate_latest(request.app.state.metrics),
                                 media_type=CONTENT_TYPE_LATEST)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard() -> str:
        return resources.files(__package__).joinpath("dashboard.html").read_text()

    return app


def _target(svc: TuningService, text: str, hardware_free: bool) -> dict:
    """The job's target, refused (422) when unknown or when no device of the service can
    time it and the job is not hardware-free."""
    from ..workload import parse_target

    try:
        target = parse_target(text, svc.threads)
    except ValueError as err:
        raise HTTPException(422, str(err)) from None
    refusal = svc.refusal(target)
    if refusal and not hardware_free:
        raise HTTPException(422, f"target {text!r}: {refusal}; submit it with "
                                 "hardware_free=true")
    return target
