"""``serve`` (the tuning service) and its clients: ``submit``, ``jobs``, ``fetch``."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..settings import Settings
from .common import console, fail

DEFAULT_URL = "http://127.0.0.1:8470"
URL_HELP = "the server (default: TENSORTUNE_SERVER or " + DEFAULT_URL + ")"
TOKEN_HELP = "the bearer token (default: TENSORTUNE_TOKEN, else the server's token file " \
             "under TENSORTUNE_HOME when it runs here)"


def _default_token_file(settings: Settings) -> Path:
    return settings.home / "service" / "token"


def serve(
    host: str = typer.Option("127.0.0.1", help="address to bind (loopback unless you mean it)"),
    port: int = typer.Option(8470, help="port"),
    token_file: Optional[Path] = typer.Option(None, help="bearer tokens, one per line "
                                              "(default: TENSORTUNE_HOME/service/token, "
                                              "created with a random token)"),
    max_upload_mb: float = typer.Option(200.0, help="the largest model accepted (MiB)"),
    policy: str = typer.Option("load-aware", help="the scheduler's policy: load-aware | "
                               "sequential | concurrent"),
    trials: int = typer.Option(200, help="trials of a job that names none"),
    devices: str = typer.Option("local", help="where candidates are timed, comma-separated: "
                                "local | cores:N | rpc:HOST:PORT:KEY[:llvm:MCPU] (as "
                                "tensortune schedule); a job goes to devices that run its target"),
    ray: bool = typer.Option(False, "--ray", help="builds as Ray tasks, devices as Ray actors "
                             "(a local Ray cluster unless --ray-address)"),
    ray_address: Optional[str] = typer.Option(None, help="an existing Ray cluster to join"),
) -> None:
    """Run the tuning service: jobs, state and records under TENSORTUNE_HOME."""
    import uvicorn

    from ..orchestrate import POLICIES, parse_devices
    from ..service.app import ServiceConfig, create_app, ensure_token_file, load_tokens

    if policy not in POLICIES:
        fail(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if max_upload_mb <= 0 or trials < 0:
        fail("--max-upload-mb must be positive and --trials not negative")
    try:
        parse_devices(devices)
    except ValueError as err:
        fail(f"--devices: {err}")
    settings = Settings.from_env()
    path = token_file or ensure_token_file(_default_token_file(settings))
    try:
        tokens = load_tokens(path)
    except (OSError, ValueError) as err:
        fail(f"token file: {err}")
    app = create_app(settings, ServiceConfig(tokens, max_upload_mb, policy, trials, devices, ray,
                                             ray_address))
    # the token itself is never printed: clients read it from the file
    console.print(f"tensortune service on http://{host}:{port} (home {settings.home}, devices "
                  f"{devices}{', on Ray' if ray or ray_address else ''}); "
                  f"tokens from {path}; dashboard: http://{host}:{port}/#token=<token>")
    uvicorn.run(app, host=host, port=port, log_level="info")


def _client(server: Optional[str], token: Optional[str]):
    from ..service.client import ServiceClient

    url = server or os.environ.get("TENSORTUNE_SERVER") or DEFAULT_URL
    token = token or os.environ.get("TENSORTUNE_TOKEN")
    if not token:
        path = _default_token_file(Settings.from_env())
        if not path.exists():
            fail(f"no token: pass --token, set TENSORTUNE_TOKEN, or run where {path} exists")
        token = path.read_text().split()[0]
    return ServiceClient(url, token)


def submit(
    model: Path = typer.Argument(..., help="an .onnx file"),
    server: Optional[str] = typer.Option(None, help=URL_HELP),
    token: Optional[str] = typer.Option(None, help=TOKEN_HELP),
    sla_ms: Optional[float] = typer.Option(None, help="the latency to reach (ms); tuning stops "
                                           "once it is met"),
    trials: Optional[int] = typer.Option(None, help="the most trials to spend"),
    target: str = typer.Option("host", help="host | llvm:<mcpu> | cuda:<arch>"),
    hardware_free: bool = typer.Option(False, "--hardware-free", help="pick configs from the "
                                       "cost model, time none"),
    wait: bool = typer.Option(False, "--wait", help="follow the job with a progress bar"),
    as_json: bool = typer.Option(False, "--json", help="end with the job as one JSON line"),
) -> None:
    """Submit a model to a tensortune service."""
    from ..service.client import ServiceError

    if not model.is_file():
        fail(f"no file {model}")
    with _client(server, token) as client:
        try:
            job = client.submit(model, sla_ms, trials, target, hardware_free)
            console.print(f"job {job['id']} ({job['name']}): {job['state']}")
            if wait:
                job = _follow(client, job["id"])
            else:
                job = client.job(job["id"])
        except ServiceError as err:
            fail(str(err))
    _describe(job)
    if as_json:
        print(json.dumps(job))
    if job["state"] == "failed":
        raise typer.Exit(1)


def _follow(client, job_id: str) -> dict:
    columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
               TimeElapsedColumn()]
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task(job_id, total=1.0, info="")

        def on_poll(job):
            best = job["predicted_ms"] if job["latency_ms"] is None else job["latency_ms"]
            info = f"{job['state']} {job['trials_done']}/{job['trials']} trials"
            if best is not None:
                info += f", {best:.3f} ms"
            progress.update(bar, completed=job["progress"], info=info)

        return client.wait(job_id, on_poll=on_poll)


def _describe(job: dict) -> None:
    lat = job.get("latency_ms")
    sla = job.get("sla_ms")
    line = f"{job['id']}: {job['state']}, {job['trials_done']} trials"
    if lat is not None:
        line += f", {lat:.3f} ms"
    if sla is not None and job.get("sla_met") is not None:
        line += f" ({'meets' if job['sla_met'] else 'misses'} the SLA of {sla} ms)"
    console.print(line)
    for text in (job.get("note"), job.get("error")):
        if text:
            console.print(f"  {text}")


def jobs(
    server: Optional[str] = typer.Option(None, help=URL_HELP),
    token: Optional[str] = typer.Option(None, help=TOKEN_HELP),
    as_json: bool = typer.Option(False, "--json", help="print the jobs as JSON"),
) -> None:
    """List a tensortune service's jobs, newest first."""
    from ..service.client import ServiceError

    with _client(server, token) as client:
        try:
            listed = client.jobs()
        except ServiceError as err:
            fail(str(err))
    if as_json:
        print(json.dumps(listed))
        return
    table = Table(title=f"{len(listed)} job(s)")
    table.add_column("job", no_wrap=True, min_width=23)
    for col in ("model", "state", "progress", "trials", "latency ms", "SLA ms", "met"):
        table.add_column(col)
    for j in listed:
        table.add_row(j["id"], j["name"], j["state"], f"{100 * j['progress']:.0f}%",
                      f"{j['trials_done']}/{j['trials']}",
                      "" if j["latency_ms"] is None else f"{j['latency_ms']:.3f}",
                      "" if j["sla_ms"] is None else f"{j['sla_ms']}",
                      "" if j["sla_met"] is None else ("yes" if j["sla_met"] else "no"))
    console.print(table)


def fetch(
    job: str = typer.Argument(..., help="the job id"),
    out: Path = typer.Option(..., "-o", "--out", help="directory to unpack the module into"),
    server: Optional[str] = typer.Option(None, help=URL_HELP),
    token: Optional[str] = typer.Option(None, help=TOKEN_HELP),
) -> None:
    """Download a job's tuned module (module/, metaschedule/, run.json) into a directory;
    run it with ``tensortune.tasks.CompiledModel.load(OUT/module)``."""
    from ..service.client import ServiceError

    with _client(server, token) as client:
        try:
            path = client.fetch(job, out)
        except ServiceError as err:
            fail(str(err))
    console.print(f"job {job}: unpacked into {path}")


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.command()(submit)
    app.command()(jobs)
    app.command()(fetch)
