"""``python -m tensortune`` is the ``tensortune`` command: the same help, the same commands."""
import os
import subprocess
import sys

COMMANDS = ("tune-op", "best", "tune-model", "evaluate", "runs", "dataset", "costmodel")


def test_python_dash_m_lists_every_command():
    done = subprocess.run([sys.executable, "-m", "tensortune", "--help"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "120"})
    assert done.returncode == 0, done.stderr
    assert "Usage: tensortune" in done.stdout
    for command in COMMANDS:
        assert command in done.stdout, command


def test_python_dash_m_runs_a_subcommand():
    done = subprocess.run([sys.executable, "-m", "tensortune", "tune-op", "softmax"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "unknown operator 'softmax'" in done.stderr
