"""Where each function's config came from, noted when a model is built and saved with it."""
from __future__ import annotations

from pathlib import Path

from ..records import load_records
from ..space.config import Config


def note_provenance(functions: dict, logs: list[Path], static: dict) -> None:
    """Add to each entry of ``functions`` (``CompiledModel.functions``) its config's source:
    ``measured`` (the fastest error-free record of that config in ``logs``: time, device,
    timestamp), ``hardware-free`` (``static``: task key -> ``StaticResult``, its predicted
    time), ``template seed``, or ``given`` (a config from elsewhere)."""
    timed: dict = {}
    for path in logs:
        for r in load_records(path) if Path(path).exists() else ():
            key = (r.task_key, r.config)
            if r.ok and (key not in timed or r.cost < timed[key].cost):
                timed[key] = r
    for info in functions.values():
        if info.get("schedule") == "seeded":
            info["source"] = "template seed"
            continue
        if info.get("config") is None:
            continue
        record = timed.get((info["task"], Config(info["config"])))
        pick = static.get(info["task"])
        if record is not None:
            info.update(source="measured", us=record.cost * 1e6, device=record.device,
                        timestamp=record.ts)
        elif pick is not None and pick.predicted_seconds:
            info.update(source="hardware-free", predicted_us=pick.predicted_seconds * 1e6)
        else:
            info["source"] = "given"
