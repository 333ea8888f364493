"""The facade end to end on a tiny model: import, tune, build, save, load, run, evaluate."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tensortune.records import load_records  # noqa: E402
from tensortune.session import Session, SessionError, list_runs  # noqa: E402
from tensortune.settings import MeasureSettings, SearchSettings, Settings  # noqa: E402


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.flatten(1))


@pytest.fixture()
def settings(tmp_path):
    return Settings(home=tmp_path / "home",
                    measure=MeasureSettings(number=1, repeat=2, min_repeat_ms=1, run_timeout_s=10),
                    search=SearchSettings(batch_size=4, sa_chains=8, sa_steps=10))


def _tiny():
    torch.manual_seed(0)
    model = Tiny().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 1.5)
    return model, (torch.randn(1, 3, 8, 8),)


def test_tune_build_save_load_run_matches_pytorch_and_second_run_is_warm(settings):
    module, inputs = _tiny()
    expected = module(*inputs).detach().numpy()
    s = Session.from_torch(module, inputs, name="tiny", settings=settings)
    tasks = s.extract()
    tunable = [t for t in tasks if t.tunable]
    # conv(+bn+relu folded), dense, and the NCHW <-> NHWC transposes at the model's edges
    assert sum("conv2d" in t.name for t in tunable) == 1
    assert sum("matmul" in t.name for t in tunable) == 1
    assert all("conv2d" in t.name or "matmul" in t.name or "transpose" in t.name
               for t in tunable), [t.name for t in tunable]
    budget = 4 * len(tunable)  # a batch each: every task ends "well tuned" for its share
    result = s.tune(budget, scheduler="round-robin")
    assert result.trials == budget
    # then the heaviest tasks' best configs were timed three times more, each in every round
    confirming = [r for r in load_records(s.run_dir / "log.jsonl") if r.confirm]
    assert result.confirmed == len(confirming) > 0
    per_config = Counter((r.task_key, r.config) for r in confirming)
    assert set(per_config.values()) == {settings.search.confirm_rounds}
    assert json.loads((s.run_dir / "run.json").read_text())["confirmed"] == result.confirmed
    s.build()
    out = s.run(inputs[0].numpy())
    np.testing.assert_allclose(out[0], expected, rtol=1e-3, atol=1e-3)
    saved = s.save()
    assert (s.run_dir / "run.json").exists() and saved.exists()
    assert {"import", "extract", "tune", "build"} <= set(s.stages)

    loaded = Session.load(s.run_id, settings=settings)
    np.testing.assert_allclose(loaded.run(inputs[0].numpy())[0], expected, rtol=1e-3, atol=1e-3)
    lat = loaded.evaluate(repeat=3)
    assert lat["median"] > 0
    with pytest.raises(SessionError, match="no model"):
        loaded.tune(4)
    assert [r["run_id"] for r in list_runs(settings)][0] == s.run_id

    # the same model again: its tasks are already tuned (each got its share), so nothing runs
    again = Session.from_torch(module, inputs, name="tiny", settings=settings)
    second = again.tune(budget, scheduler="round-robin")
    assert second.trials == 0 and len(second.skipped) == len(tunable) and second.confirmed == 0
    again.build()
    np.testing.assert_allclose(again.run(inputs[0].numpy())[0], expected, rtol=1e-3, atol=1e-3)


def test_onnx_import_tunes_and_matches(settings, tmp_path):
    module, inputs = _tiny()
    path = tmp_path / "tiny.onnx"
    torch.onnx.export(module, inputs, str(path), input_names=["x"], dynamo=False)
    s = Session.from_onnx(path, settings=settings)
    s.tune(4, scheduler="round-robin")
    s.build()
    np.testing.assert_allclose(s.run(inputs[0].numpy())[0], module(*inputs).detach().numpy(),
                               rtol=1e-3, atol=1e-3)


def test_run_before_build_is_refused(settings):
    module, inputs = _tiny()
    s = Session.from_torch(module, inputs, settings=settings)
    with pytest.raises(SessionError, match="build"):
        s.run(inputs[0].numpy())
    with pytest.raises(SessionError, match="no run"):
        Session.load("nonexistent", settings=settings)


def test_hardware_free_tunes_without_timing_then_verify_top_times_only_the_best(settings):
    module, inputs = _tiny()
    expected = module(*inputs).detach().numpy()
    s = Session.from_torch(module, inputs, name="tiny", settings=settings)
    tunable = [t for t in s.extract() if t.tunable]
    seen = []
    counts = s.tune_hardware_free(on_task=lambda t, res: seen.append((t.name, res)))
    assert counts["timed"] == 0 and counts["compiled"] > 0 and counts["predicted_ms"] > 0
    assert len(seen) == len(tunable) and all(res.best is not None for _, res in seen)
    assert not s.records_path.exists()  # nothing measured, nothing recorded
    s.build()
    np.testing.assert_allclose(s.run(inputs[0].numpy())[0], expected, rtol=1e-3, atol=1e-3)
    s.save()
    assert (s.run_dir / "metaschedule" / "database_tuning_record.json").exists()

    again = Session.from_torch(module, inputs, name="tiny", settings=settings)
    counts = again.tune_hardware_free(verify_top=2, effort="fast")  # full effort is above
    assert counts["timed"] == 2 * len(tunable)
    assert len(again.verified) == len(tunable)
    again.build()
    np.testing.assert_allclose(again.run(inputs[0].numpy())[0], expected, rtol=1e-3, atol=1e-3)


def test_fast_hardware_free_compiles_a_few_seeds_of_each_computing_task(settings):
    from tensortune.tuner.static import FAST_COMPILED

    module, inputs = _tiny()
    expected = module(*inputs).detach().numpy()
    s = Session.from_torch(module, inputs, name="tiny", settings=settings)
    seen = []
    counts = s.tune_hardware_free(effort="fast", on_task=lambda t, res: seen.append(res))
    assert counts["effort"] == "fast" and counts["timed"] == 0
    computing = [res for res in seen if res.task.workload.flops]
    assert computing and all(0 < res.compiled <= FAST_COMPILED for res in computing)
    # a transpose has no throughput for the models to predict: nothing compiled for it
    assert all(res.compiled == 0 and res.best for res in seen if not res.task.workload.flops)
    s.build()
    np.testing.assert_allclose(s.run(inputs[0].numpy())[0], expected, rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match="unknown effort"):
        s.tune_hardware_free(effort="slow")
