"""What the command prints besides results: TVM's warnings kept out of ``profile`` and
``evaluate`` (at file-descriptor level, where TVM writes them), ``--verbose`` logging."""
import os

import pytest
from typer.testing import CliRunner

from tensortune.cli import app, logs

runner = CliRunner()
# as TVM 0.27's VM logs it for each memory scope of an executable it loads
SCOPE_LOADED = b"[12:00:00] /project/src/runtime/vm/executable.cc:340: Warning: Scope Loaded: 0\n"


@pytest.fixture(autouse=True)
def quiet_after():
    yield
    logs.configure(False)  # a --verbose invocation leaves its handler on the global logger


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A saved run of a two-layer MLP with LayerNorm (TVM's default schedules, no tuning)."""
    torch = pytest.importorskip("torch")
    from tensortune.session import Session
    from tensortune.settings import Settings

    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("TENSORTUNE_HOME", str(home))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 8)).eval()
    session = Session.from_torch(model, (torch.randn(2, 16),), name="mlp",
                                 settings=Settings.from_env())
    session.build(tuned=False)
    session.save()
    yield str(session.run_dir)  # the commands take a run's directory as well as its id
    mp.undo()


def _noisy_loads(monkeypatch):
    """Make every library load write TVM's warning (and a line of someone else's) to fd 2."""
    import tvm

    real = tvm.runtime.load_module

    def load_module(*args, **kwargs):
        os.write(2, SCOPE_LOADED * 3 + b"a C library's own line\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(tvm.runtime, "load_module", load_module)


@pytest.mark.parametrize("command", [["profile", "--repeat", "2"], ["evaluate", "--repeat", "2"]])
def test_tvm_warnings_are_kept_out_of_profile_and_evaluate(tiny_run, monkeypatch, capfd, command):
    _noisy_loads(monkeypatch)
    name, *options = command
    app([name, tiny_run, *options], prog_name="tensortune", standalone_mode=False)
    out, err = capfd.readouterr()
    assert "Scope Loaded" not in out + err
    assert "a C library's own line" in err  # only TVM's warnings are dropped
    assert ("fused_" in err) if name == "profile" else ("median" in err)
    # --verbose shows them
    app(["--verbose", name, tiny_run, *options], prog_name="tensortune", standalone_mode=False)
    out, err = capfd.readouterr()
    assert err.count("Scope Loaded") == 3


def test_verbose_logs_every_trial(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORTUNE_MIN_REPEAT_MS", "1")
    monkeypatch.setenv("TENSORTUNE_REPEAT", "1")
    args = ["tune-op", "matmul", "--m", "8", "--n", "8", "--k", "8", "--trials", "2",
            "--tuner", "random"]
    res = runner.invoke(app, ["--verbose", *args, "--log", str(tmp_path / "a.jsonl")])
    assert res.exit_code == 0, res.output
    assert "trial 1: matmul(m=8, n=8, k=8)" in res.output and "trial 2:" in res.output
    res = runner.invoke(app, [*args, "--log", str(tmp_path / "b.jsonl")])
    assert res.exit_code == 0, res.output
    assert "trial 1:" not in res.output

