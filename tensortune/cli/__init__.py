"""The ``tensortune`` command, one module per command group:

* ``ops``: ``tune-op`` (tune one operator) and ``best`` (the best record of each task in a log);
* ``model``: ``tune-model`` (whole models, through ``Session``);
* ``runs``: ``evaluate``, ``profile`` and ``runs`` (saved runs);
* ``dataset``: ``dataset collect|remeasure|info|features``;
* ``costmodel``: ``costmodel eval|compare``;
* ``orchestrate``: ``schedule`` (many jobs under one scheduler) and ``experiment`` (grids);
* ``measure``: ``measure export|import`` (batches of CUDA candidates for a GPU host);
* ``deploy``: ``export`` (a saved run as a directory that runs without the compiler);
* ``service``: ``serve`` (the tuning service) and its clients ``submit``, ``jobs``, ``fetch``;
* ``common``: the console and the helpers they share; ``logs``: ``--verbose`` and TVM's noise.

``--verbose`` (before the command) logs each trial and other details at debug level, and lets
TVM's own warnings through.
"""
from __future__ import annotations

import typer

from . import costmodel, dataset, deploy, logs, measure, model, ops, orchestrate, runs, service

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="tensortune: tune tensor programs on Apache TVM.")


@app.callback()
def options(verbose: bool = typer.Option(
        False, "--verbose", "-v",
        help="debug logging (each trial, worker restarts) and TVM's own warnings")):
    """tensortune: tune tensor programs on Apache TVM."""
    logs.configure(verbose)


ops.register(app)
model.register(app)
runs.register(app)
dataset.register(app)
costmodel.register(app)
orchestrate.register(app)
measure.register(app)
deploy.register(app)
service.register(app)


def main() -> None:  # pragma: no cover - console entry point
    app(prog_name="tensortune")


__all__ = ["app", "main"]
