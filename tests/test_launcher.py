"""The parallel launcher (``measure/launcher.c``): a loaded model's kernels run their tasks on
it, with TVM's results, from several Python threads at once, and ``TENSORTUNE_TVM_POOL=1``
keeps TVM's own pool."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

from tensortune.measure import launcher
from tensortune.session import Session
from tensortune.settings import MeasureSettings, Settings
from tensortune.tasks import CompiledModel


class Net(torch.nn.Module):
    """A 3-channel stem on a 37x37 image, a 24 -> 72 convolution and a 72 -> 10 classifier:
    parallel kernels of several shapes."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 24, 3, padding=1)
        self.conv = torch.nn.Conv2d(24, 72, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(72, 10)

    def forward(self, x):
        y = torch.relu(self.conv(torch.relu(self.stem(x))))
        return self.fc(y.mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The model built on its seeds and saved; its in-memory run's output as the reference."""
    home = tmp_path_factory.mktemp("home")
    torch.manual_seed(0)
    x = torch.randn(1, 3, 37, 37)
    settings = Settings(home=home, measure=MeasureSettings(number=1, repeat=2))
    session = Session.from_torch(Net().eval(), (x,), name="net", settings=settings)
    session.build(best={})
    directory = session.save()
    return directory, x.numpy(), session.run(x.numpy())[0]


def test_a_loaded_model_runs_its_kernels_on_the_launcher(saved):
    directory, x, expected = saved
    before = launcher.launches()
    model = CompiledModel.load(directory)
    np.testing.assert_allclose(model.run(x)[0], expected, rtol=1e-5, atol=1e-5)
    assert launcher.launches() > before, "no kernel went through tt_parallel_launch"
    # several Python threads at once, each with its own model (a VM is not thread-safe) on
    # the one library: one launches at a time, the others run their tasks alone
    results, errors = [], []

    def call():
        try:
            mine = CompiledModel.load(directory)
            for _ in range(20):
                results.append(mine.run(x)[0])
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and len(results) == 60
    for got in results:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_the_switch_keeps_tvms_pool(saved):
    directory, x, expected = saved
    script = ("import json, sys, numpy as np\n"
              "from tensortune.measure import launcher\n"
              "from tensortune.tasks import CompiledModel\n"
              f"m = CompiledModel.load({str(directory)!r})\n"
              f"y = m.run(np.load({str(directory / 'x.npy')!r}))[0]\n"
              "print(json.dumps({'launches': launcher.launches(), 'y': y.tolist()}))\n")
    np.save(directory / "x.npy", x)
    env = {**os.environ, launcher.KEEP_TVM_POOL: "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["launches"] == 0
    np.testing.assert_allclose(np.array(out["y"], dtype=np.float32), expected, rtol=1e-5,
                               atol=1e-5)


def test_a_tuning_candidate_is_timed_on_the_launcher():
    """The runner times a candidate as the model will run it: its tasks on the launcher."""
    from tensortune.measure import ErrorKind, LocalBuilder, MeasureInput
    from tensortune.measure.runner import _run_one
    from tensortune.space import task_space
    from tensortune.workload import Matmul, Task, default_target

    task = Task(Matmul(m=72, n=200, k=120), default_target(2))
    rng = np.random.default_rng(0)
    inputs = [MeasureInput(task, task_space(task).sample(rng)) for _ in range(8)]
    with LocalBuilder(workers=1, timeout_s=60.0) as builder:
        built = [b for b in builder.build(inputs) if b.error is ErrorKind.NONE]
        assert built, "none of eight sampled configs built"
        build = built[0]
        assert launcher.usable(build.path)
        before = launcher.launches()
        kind, costs, verified, message, _ = _run_one({
            "path": build.path, "workload": task.workload.to_dict(), "seed": 0,
            "prepack": build.prepack, "warmup": 1, "number": 2, "repeat": 2, "min_repeat_ms": 1,
            "preproc": "", "verify": True, "rtol": 1e-4, "atol": 1e-4, "cpus": None})
        assert (kind, verified) == (ErrorKind.NONE.value, True), message
        assert len(costs) == 2 and min(costs) > 0
        assert launcher.launches() > before, "the candidate's kernel kept TVM's pool"
