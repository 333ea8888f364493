"""``tensortune export``: a saved run as a directory that runs without the compiler."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from .common import console, fail


def export(
    run: str = typer.Argument(..., help="run id (see `tensortune runs`) or run directory"),
    out: Path = typer.Option(..., "--out", help="directory to write (new or empty)"),
    runtime: bool = typer.Option(False, "--runtime", help="bundle TVM's runtime, trimmed to "
                                 "what the model needs, so DIR runs with numpy alone"),
    python: Optional[str] = typer.Option(None, "--python", help="with --runtime: the Python "
                                         "version of the machine that will run it (e.g. 3.12)"),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace an earlier export"),
    synthetic: Optional[int] = typer.Option(None, "--synthetic-weights", metavar="SEED",
                                            help="ship no weights: the loader makes them from "
                                            "SEED (to time a model on a host its weights cannot "
                                            "reach; the test vector uses them too)"),
    as_json: bool = typer.Option(False, "--json", help="end with the manifest as one JSON line"),
):
    """Write a saved run as a shippable directory: library, weights, manifest, test vector and
    `predict.py` (needs TVM's runtime and numpy only)."""
    from ..deploy import ExportError, RuntimeBundleError
    from ..session import Session, SessionError

    if python and not runtime:
        fail("--python chooses the bundled runtime's Python: give --runtime too")
    try:
        session = Session.load(run)
        manifest = session.export(out, runtime=runtime, python=python, overwrite=overwrite,
                                  synthetic_seed=synthetic)
    except (SessionError, ExportError, RuntimeBundleError, FileNotFoundError) as err:
        fail(str(err))
    mb = {k: v / 1e6 for k, v in manifest["sizes"].items()}
    console.print(f"exported {manifest['name']} ({manifest['device']}) to {out}: library "
                  f"{mb['library']:.1f} MB, weights "
                  + (f"{mb['weights']:.1f} MB" if synthetic is None else f"made from seed {synthetic}")
                  + (f", runtime {mb['runtime']:.1f} MB" if runtime else "")
                  + f", {mb['total']:.1f} MB in all")
    if manifest["default_functions"]:
        console.print(f"  built with the default schedule: {', '.join(manifest['default_functions'])}")
    console.print(f"  run it: python {out}/predict.py IN.npz OUT.npz  (check: python "
                  f"{out}/predict.py --check)")
    if as_json:
        sys.stdout.write(json.dumps(manifest) + "\n")


def register(app: typer.Typer) -> None:
    app.command("export")(export)
