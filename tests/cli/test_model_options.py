"""tune-model refuses a bad option before it imports anything."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tensortune.cli import app

runner = CliRunner()


@pytest.mark.parametrize("options, says", [
    (["--effort", "slow", "--hardware-free"], "--effort is one of"),
    (["--tuner", "nope"], "--tuner is one of"),
    (["--scheduler", "nope"], "--scheduler is one of"),
    (["--cost-model", "nope"], "--cost-model is one of"),
    (["--verify-top", "2"], "go with --hardware-free"),
    (["--target", "cuda:sm_90"], "CUDA target"),
])
def test_bad_options_exit_2_before_the_import(monkeypatch, options, says):
    from tensortune.session import Session

    def no_import(*args, **kwargs):
        raise AssertionError("imported the model before checking the options")

    monkeypatch.setattr(Session, "from_zoo", no_import)
    res = runner.invoke(app, ["tune-model", "resnet18", *options])
    assert res.exit_code == 2 and says in res.output, res.output
