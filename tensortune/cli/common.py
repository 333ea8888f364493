"""What the command groups share: the console (stderr; stdout is kept for ``--json`` lines),
failing with exit code 2, comma-separated options, and loading a dataset argument."""
from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

console = Console(stderr=True)


def fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(2)


def choices(names, describe=None) -> str:
    """A help text listing ``names`` (from a registry) as ``a | b``, each with its one-line
    description when ``describe`` gives one: ``a (what a is) | b (...)``."""
    return " | ".join(f"{n} ({describe(n)})" if describe else n for n in names)


def split_names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def load_or_fail(path: Path):
    """The dataset at ``path``, or exit 2 naming what is wrong with it."""
    from ..dataset import load_dataset

    if not path.exists():
        fail(f"no such dataset: {path}")

    def corrupt(lineno, reason):
        console.print(f"[yellow]warning:[/yellow] {path}:{lineno}: skipped corrupt record "
                      f"({reason})")

    try:
        dataset = load_dataset(path, on_corrupt=corrupt)
    except ValueError as err:
        fail(str(err))
    if not len(dataset):
        fail(f"{path} holds no records")
    return dataset
