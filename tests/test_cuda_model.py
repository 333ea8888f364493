"""Whole models for a CUDA GPU this machine lacks: hardware-free picks from the analytical GPU
model over nvcc's PTX, a saved module and MetaSchedule database, nothing run."""
import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tensortune.cli import app
from tensortune.cost_model.gpu_analytic import predicted_seconds
from tensortune.features.hardware_cuda import FEATURE_NAMES
from tensortune.session import Session, SessionError
from tensortune.settings import MeasureSettings, SearchSettings, Settings
from tensortune.workload import parse_target

CUDA = parse_target("cuda:sm_90")


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def row(**values):
    """A ``hardware_cuda`` row: counts are given plainly and stored as log2(1 + n)."""
    r = np.zeros(len(FEATURE_NAMES), dtype=np.float32)
    base = {"log_blocks": 7.0, "warps": 4.0, "occupancy": 0.5, "waves": 0.5, "dyn_fma": 1e6}
    for name, v in {**base, **values}.items():
        r[FEATURE_NAMES.index(name)] = math.log2(1 + v) if name.startswith("dyn_") else v
    return r


def test_analytic_time_follows_work_occupancy_and_memory():
    base = predicted_seconds(row())
    assert base > 3e-6  # at least the launch
    assert predicted_seconds(row(dyn_fma=1e9)) > predicted_seconds(row(dyn_fma=1e8)) > base
    # fewer resident warps hide less latency: the same work takes longer
    assert predicted_seconds(row(dyn_fma=1e8, occupancy=0.03125)) > \
        predicted_seconds(row(dyn_fma=1e8))
    # global traffic beyond what issue time covers sets the time
    assert predicted_seconds(row(**{"dyn_ld.global": 1e9})) > predicted_seconds(row())
    assert predicted_seconds(row(invalid=1.0)) == math.inf
    assert predicted_seconds(row(nvcc_failed=1.0)) == math.inf


@pytest.fixture(scope="module")
def cuda_run(tmp_path_factory):
    settings = Settings(home=tmp_path_factory.mktemp("home"), target=CUDA,
                        measure=MeasureSettings(build_workers=2),
                        search=SearchSettings(es_starts=1, es_population=4, es_generations=2))
    torch.manual_seed(0)
    session = Session.from_torch(Small().eval(), (torch.randn(1, 3, 12, 12),), settings=settings)
    counts = session.tune_hardware_free()
    session.build()
    session.save()
    return session, counts


def test_hardware_free_cuda_run_saves_a_module_and_database(cuda_run):
    session, counts = cuda_run
    tunable = [t for t in session.extract() if t.tunable]
    assert tunable and all(t.task.template == "cuda.generic" for t in tunable)
    assert counts["timed"] == 0 and counts["compiled"] >= len(tunable)
    assert counts["predicted_ms"] > 0
    for t in tunable:  # every task has a pick with a predicted throughput
        res = session.static[t.key]
        assert res.best is not None and res.ranked[0][1] > 0
    module = session.run_dir / "module"
    assert (module / "model.so").stat().st_size > 0
    assert json.loads((module / "model.json").read_text())["target"]["kind"] == "cuda"
    db = session.run_dir / "metaschedule" / "database_tuning_record.json"
    assert len(db.read_text().splitlines()) == len(tunable)
    with pytest.raises(RuntimeError, match="no such device"):
        session.run(np.zeros((1, 3, 12, 12), np.float32))
    with pytest.raises(SessionError, match="hardware-free"):
        session.tune(4)


def test_cli_takes_cuda_only_hardware_free(tmp_path):
    res = CliRunner().invoke(app, ["tune-model", "resnet18", "--target", "cuda:sm_90",
                                   "--trials", "4"])
    assert res.exit_code == 2 and "--hardware-free" in res.output
    res = CliRunner().invoke(app, ["tune-model", "resnet18", "--target", "cuda:sm_90",
                                   "--hardware-free", "--verify-top", "2"])
    assert res.exit_code == 2 and "no GPU" in res.output
