"""Deploying without the compiler: weights out of the library, the export directory, its
loader in a fresh Python that holds numpy alone, synthetic weights, the CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from tensortune.cli import app  # noqa: E402
from tensortune.deploy import ExportError, read_manifest  # noqa: E402
from tensortune.session import Session  # noqa: E402
from tensortune.settings import MeasureSettings, Settings  # noqa: E402
from tensortune.tasks.weights import lift_weights  # noqa: E402


class Small(torch.nn.Module):
    """A 3-channel stem on an odd size, a grouped convolution and a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 24, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(24)
        self.group = torch.nn.Conv2d(24, 24, 3, padding=1, groups=3)
        self.fc = torch.nn.Linear(24, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.stem(x)))
        y = torch.relu(self.group(y))
        return self.fc(y.mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tuned-with-seeds CPU session of ``Small``, built and saved."""
    home = tmp_path_factory.mktemp("home")
    torch.manual_seed(0)
    module = Small().eval()
    inputs = (torch.randn(1, 3, 19, 19),)
    settings = Settings(home=home, measure=MeasureSettings(number=1, repeat=2))
    session = Session.from_torch(module, inputs, name="small", settings=settings)
    session.build(best={})  # every tunable function on its template's first seed
    session.save()
    return session, module, inputs


@pytest.fixture(scope="module")
def numpy_only_python(tmp_path_factory):
    """A fresh virtual environment whose only package is numpy (no TVM, no tensortune)."""
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(root / "env")
    shelf = root / "numpy-only"
    shelf.mkdir()
    numpy_dir = Path(np.__file__).parent
    for name in ("numpy", "numpy.libs"):
        if (numpy_dir.parent / name).exists():
            (shelf / name).symlink_to(numpy_dir.parent / name)
    site = next((root / "env" / "lib").glob("python*/site-packages"))
    (site / "numpy_only.pth").write_text(str(shelf) + "\n")
    return root / "env" / "bin" / "python"


def _run(python, *args, cwd=None):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(python), *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def test_weights_are_lifted_out_of_the_library(built):
    session, _, _ = built
    compiled = session.compiled
    assert compiled.weights, "the conv, grouped conv and dense weights"
    library = (session.run_dir / "module" / "model.so").stat().st_size
    weights = sum(w.value.nbytes for w in compiled.weights)
    assert (session.run_dir / "module" / "weights.npz").exists()
    names = [w.name for w in compiled.weights]
    assert names == [f"w{i}" for i in range(len(names))]
    # the saved run loads with its weights and gives the same outputs
    x = np.random.default_rng(1).standard_normal((1, 3, 19, 19)).astype("float32")
    loaded = Session.load(session.run_dir, settings=session.settings)
    np.testing.assert_array_equal(loaded.run(x)[0], session.run(x)[0])
    assert weights > 0 and library > 0


def test_lift_keeps_small_constants_in_the_library(built):
    session, _, _ = built
    from tensortune.tasks.compile import _schedule

    mod, _, _ = _schedule(session.model, session.target, {}, None, session.graph)
    lifted, weights = lift_weights(mod, min_bytes=1 << 30)
    assert weights == () and lifted is mod
    lifted, weights = lift_weights(mod)
    main = lifted["main"]
    assert int(main.attrs["num_input"]) == 1
    assert len(main.params) == 1 + len(weights)


def test_export_runs_in_a_python_with_numpy_alone(built, tmp_path, numpy_only_python):
    session, module, inputs = built
    out = tmp_path / "small"
    manifest = session.export(out, runtime=True)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["model.so", "weights.npz", "check.npz", "predict.py", "manifest.json", "runtime",
         "launcher.so"])
    assert manifest["launcher"] == "launcher.so"  # the kernels' tasks on our launcher there too
    assert manifest == read_manifest(out)
    assert manifest["device"] == "cpu" and manifest["inputs"][0]["shape"] == [1, 3, 19, 19]
    assert manifest["weights"]["arrays"] and manifest["weights"]["sha256"]
    assert not (out / "runtime" / "tvm" / "lib" / "libtvm_compiler.so").exists()
    assert manifest["sizes"]["runtime"] < 20e6  # the compiler (259 MB) stays behind
    tuned = [f for f in manifest["functions"] if f["schedule"] in ("tuned", "seeded")]
    assert tuned and all(f["config"] and f["source"] == "template seed" for f in tuned)
    # the fresh Python has neither the compiler nor tensortune
    probe = _run(numpy_only_python, "-c", "import tvm")
    assert probe.returncode != 0 and "No module named 'tvm'" in probe.stderr
    check = _run(numpy_only_python, out / "predict.py", "--check")
    assert check.returncode == 0, check.stderr
    x = np.random.default_rng(2).standard_normal((1, 3, 19, 19)).astype("float32")
    np.savez(tmp_path / "in.npz", x=x)
    done = _run(numpy_only_python, out / "predict.py", tmp_path / "in.npz", tmp_path / "out.npz")
    assert done.returncode == 0, done.stderr
    got = np.load(tmp_path / "out.npz")["output0"]
    np.testing.assert_allclose(got, session.run(x)[0], rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        np.testing.assert_allclose(got, module(torch.from_numpy(x)).numpy(), rtol=1e-3,
                                   atol=1e-4)
    # ... and from Python: load(DIR) gives a callable
    code = ("import sys, numpy as np; sys.path.insert(0, sys.argv[1]); from predict import load;"
            "m = load(sys.argv[1]); y = m(np.load(sys.argv[2])['x'])['output0'];"
            "import ctypes; lib = ctypes.CDLL(sys.argv[1] + '/launcher.so');"
            "print(y.shape, m.launcher, ctypes.c_long.in_dll(lib, 'tt_launches').value > 0)")
    call = _run(numpy_only_python, "-c", code, out, tmp_path / "in.npz")
    assert call.returncode == 0 and call.stdout.strip() == "(1, 10) True True", call.stderr


def test_a_swapped_weights_file_of_another_shape_is_refused(built, tmp_path):
    session, _, _ = built
    out = tmp_path / "small"
    session.export(out)
    arrays = dict(np.load(out / "weights.npz"))
    arrays["w0"] = arrays["w0"][..., :1]
    np.savez(out / "weights.npz", **arrays)
    sys.path.insert(0, str(out))
    try:
        from predict import load

        with pytest.raises(ValueError, match="weight w0"):
            load(out)
    finally:
        sys.path.remove(str(out))
        sys.modules.pop("predict", None)


def test_synthetic_weights_ship_no_weights_and_still_check(built, tmp_path):
    session, _, _ = built
    out = tmp_path / "synthetic"
    manifest = session.export(out, synthetic_seed=3)
    assert not (out / "weights.npz").exists()
    assert manifest["weights"]["synthetic"]["seed"] == 3
    check = _run(sys.executable, out / "predict.py", "--check")
    assert check.returncode == 0, check.stderr
    # the test vector was made with the synthetic weights, not the model's
    real = np.load(out / "check.npz")
    x = real["input:x"]
    assert not np.allclose(real["output:output0"], session.run(x)[0], rtol=1e-3)


def test_export_refuses_a_directory_that_holds_something_else(built, tmp_path):
    session, _, _ = built
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="not empty"):
        session.export(tmp_path / "taken")
    with pytest.raises(ExportError, match="holds no export"):
        session.export(tmp_path / "taken", overwrite=True)
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"


def test_cli_export_of_a_saved_run(built, tmp_path):
    session, _, _ = built
    env = {"TENSORTUNE_HOME": str(session.settings.home)}
    runner = CliRunner()
    result = runner.invoke(app, ["export", session.run_id, "--out", str(tmp_path / "e"),
                                 "--json"], env=env)
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout.strip().splitlines()[-1])
    assert manifest["run_id"] == session.run_id and (tmp_path / "e" / "predict.py").exists()
    bad = runner.invoke(app, ["export", session.run_id, "--out", str(tmp_path / "f"),
                              "--python", "3.12"], env=env)
    assert bad.exit_code == 2 and "--runtime" in bad.output
    missing = runner.invoke(app, ["export", "no-such-run", "--out", str(tmp_path / "g")],
                            env=env)
    assert missing.exit_code == 2 and "no run" in missing.output


def test_a_cuda_export_is_checked_against_this_cpus_build(tmp_path):
    torch.manual_seed(0)
    module = Small().eval()
    inputs = (torch.randn(1, 3, 19, 19),)
    settings = Settings(home=tmp_path / "home",
                        target={"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}})
    session = Session.from_torch(module, inputs, name="small", settings=settings)
    session.build(tuned=False)
    manifest = session.export(tmp_path / "cuda", runtime=True)
    assert manifest["device"] == "cuda" and manifest["check"]["rtol"] == 1e-3
    assert (tmp_path / "cuda" / "runtime" / "tvm" / "lib" / "libtvm_runtime_cuda.so").exists()
    check = np.load(tmp_path / "cuda" / "check.npz")
    with torch.no_grad():
        np.testing.assert_allclose(check["output:output0"],
                                   module(torch.from_numpy(check["input:x"])).numpy(),
                                   rtol=1e-3, atol=1e-4)
    # untuned on a GPU is dlight's rules, not TVM's unscheduled default
    assert manifest["default_functions"] == []
    assert {f["schedule"] for f in manifest["functions"]} <= {"dlight", "view"}
