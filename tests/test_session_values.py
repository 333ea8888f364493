"""The session's stage values: what a tuned build uses, and the stage kinds' names."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from tensortune.session import BuiltModel, ExtractedTasks, TunedRecords
from tensortune.tuner.stages import BUILD_MODEL, EXTRACT, IMPORT, KINDS, PACK, PROPOSE, Stage


def test_tuned_records_prefer_the_verified_then_the_predicted_picks_then_the_records(tmp_path):
    records = tmp_path / "records.jsonl"
    assert TunedRecords().best(records) is None  # nothing tuned, no records: TVM's defaults
    records.write_text("")
    assert TunedRecords().best(records) == records
    static = {"a": SimpleNamespace(best="pa"), "b": SimpleNamespace(best="pb"),
              "c": SimpleNamespace(best=None)}
    tuned = TunedRecords(static=static, verified={"b": "vb"})
    assert tuned.best(records) == {"a": "pa", "b": "vb"}


def test_stage_values_are_frozen():
    tasks = ExtractedTasks((SimpleNamespace(tunable=True), SimpleNamespace(tunable=False)))
    assert len(tasks.tunable) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        BuiltModel(compiled=None).compiled = object()


def test_stage_kinds_name_what_they_do_and_old_events_still_read():
    for kind in (IMPORT, EXTRACT, BUILD_MODEL, PACK):
        assert kind in KINDS and kind != PROPOSE
    Stage(PROPOSE, lambda _: None)  # events stored as "propose" before the renames
    with pytest.raises(ValueError, match="unknown stage kind"):
        Stage("compile", lambda _: None)
