"""A run's bookkeeping that needs no session: its file, its tasks' labels, the runs saved."""
from __future__ import annotations

import json

from ..frontend import from_onnx, from_torch
from ..settings import Settings

RUN_FILE = "run.json"


class SessionError(RuntimeError):
    """A session step asked for in the wrong state (e.g. ``run`` before ``build``)."""


def model_from_spec(spec: dict):
    """The model a run was made from, imported again from its spec (zoo or ONNX runs)."""
    if spec.get("source") == "zoo":
        from ..zoo import zoo_model  # torch: imported only for the zoo

        # every zoo run records its size; a spec without one means the model's default
        module, inputs = zoo_model(spec["name"], batch=spec.get("batch", 1),
                                   image_size=spec.get("image_size"),
                                   seq_len=spec.get("seq_len", 128))
        return from_torch(module, inputs, name=spec["name"])
    if spec.get("source") == "onnx":
        return from_onnx(spec["path"])
    raise SessionError(f"run of {spec.get('name')!r} came from a {spec.get('source')} module; "
                       "import it again in Python to rebuild it")


def task_label(t) -> str:
    """A task's unique, readable label: its function name (several tasks of a model can share
    one, e.g. every conv2d+add+relu) plus the head of its key."""
    return f"{t.name}#{t.key[:6]}"


def list_runs(settings: Settings | None = None) -> list[dict]:
    """Every run under the home directory, newest first."""
    settings = settings or Settings.from_env()
    root = settings.home / "runs"
    runs = []
    for path in sorted(root.glob(f"*/{RUN_FILE}"), reverse=True) if root.exists() else []:
        try:
            runs.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue  # a run being written right now
    return runs

