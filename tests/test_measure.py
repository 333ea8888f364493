"""Measurement: the worker pool, the builder and the runner, including candidates that crash,
hang or compute wrong results (see tests/faulty_templates.py)."""
from __future__ import annotations

import ctypes
import functools
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tensortune.measure import (BuildResult, ErrorKind, JobFailure, LocalBuilder, LocalRunner,
                                MeasureInput, MeasureResult, Runner, WorkerPool)
from tensortune.measure import pool as pool_module
from tensortune.measure.pool import CRASHED, ERROR, TIMEOUT
from tensortune.settings import MeasureSettings
from tensortune.space import Config, task_space
from tensortune.workload import Matmul, Task, default_target

from tests.flaky_start import flaky_start

WORKLOAD = Matmul(m=32, n=32, k=32)
SETTINGS = MeasureSettings(run_timeout_s=3.0, number=2, repeat=2, min_repeat_ms=2, warmup=1)


def _pid(_job):
    return os.getpid()


# -- pool ------------------------------------------------------------------------------------------

def test_pool_reports_results_errors_timeouts_and_crashes_and_recovers():
    with WorkerPool(2) as pool:
        assert pool.map(math.sqrt, [4.0, 9.0, 16.0], timeout_s=10) == [2.0, 3.0, 4.0]
        pids = set(pool.map(_pid, [0, 1, 2, 3], timeout_s=10))
        assert len(pids) <= 2 and os.getpid() not in pids

        out = pool.map(math.sqrt, [-1.0], timeout_s=10)
        assert isinstance(out[0], JobFailure) and out[0].kind == ERROR and "ValueError" in out[0].message
        assert set(pool.map(_pid, [0, 1], timeout_s=10)) <= pids  # an exception costs no restart

        start = time.monotonic()
        out = pool.map(time.sleep, [30, 0], timeout_s=1.0)
        assert time.monotonic() - start < 15
        assert out[0].kind == TIMEOUT and out[1] is None

        out = pool.map(ctypes.string_at, [0], timeout_s=10)  # reads address 0: SIGSEGV
        assert out[0].kind == CRASHED and "SIGSEGV" in out[0].message and out[0].exitcode < 0

        assert pool.map(math.sqrt, [25.0, 36.0], timeout_s=10) == [5.0, 6.0]
        after = set(pool.map(_pid, [0, 1], timeout_s=10))
        assert len(after) == 2 and len(pids & after) <= 1  # the killed workers were replaced


def test_a_limit_that_tightens_as_jobs_finish_cuts_the_late_slow_job():
    seen = []

    def limit(done):  # 60 s until three jobs are done, then 1 s
        seen.append(len(done))
        return 60.0 if len(done) < 3 else 1.0

    with WorkerPool(1) as pool:
        start = time.monotonic()
        out = pool.map(time.sleep, [0.01, 0.01, 0.01, 30], timeout_s=limit)
        assert time.monotonic() - start < 20
    assert out[:3] == [None] * 3 and out[3].kind == TIMEOUT and out[3].limit_s == 1.0
    assert "1 s" in out[3].message and seen == [0, 1, 2, 3]


def _nap(seconds):
    time.sleep(seconds)
    return seconds


def test_jobs_the_limit_does_not_count_leave_it_where_it_was():
    """A config the template refuses is a build done in milliseconds: counted, three of them
    tightened a batch's limit until a real build of a CUDA kernel (3 s on a slow host) was cut
    short. The builder counts only built libraries (``counted``)."""
    def limit(done):  # 60 s until three jobs are done, then 10 x their median
        return 60.0 if len(done) < 3 else 10 * sorted(done)[len(done) // 2]

    with WorkerPool(1) as pool:
        cut = pool.map(_nap, [0.0, 0.0, 0.0, 1.5], timeout_s=limit)
        kept = pool.map(_nap, [0.0, 0.0, 0.0, 1.5], timeout_s=limit, counted=lambda s: s > 0)
    assert cut[3].kind == TIMEOUT and kept == [0.0, 0.0, 0.0, 1.5]


def test_a_replacement_that_fails_to_start_is_retried_then_named(tmp_path, monkeypatch):
    monkeypatch.setattr(pool_module, "REPLACE_BACKOFF_S", 0.0)
    countdown = tmp_path / "countdown"
    countdown.write_text("0")
    with WorkerPool(1, initializer=functools.partial(flaky_start, str(countdown))) as pool:
        assert pool.map(math.sqrt, [4.0], timeout_s=10) == [2.0]
        countdown.write_text(str(pool_module.REPLACE_ATTEMPTS - 1))  # all but the last start fail
        out = pool.map(ctypes.string_at, [0], timeout_s=10)
        assert out[0].kind == CRASHED and countdown.read_text() == "0"
        assert pool.map(math.sqrt, [9.0], timeout_s=10) == [3.0]

        countdown.write_text(str(pool_module.REPLACE_ATTEMPTS))  # every start fails
        with pytest.raises(RuntimeError, match=r"could not replace a worker in 3 attempts; "
                                               r"the last: worker failed to start \(exit code 3\)"):
            pool.map(ctypes.string_at, [0], timeout_s=10)


@pytest.mark.parametrize("preload", [[], ["math"]])
def test_a_script_without_a_main_guard_starts_workers_once(tmp_path, preload):
    """multiprocessing re-runs the main script in a spawned worker and in a forkserver; an
    unguarded user script would start its whole run again there."""
    script = tmp_path / "unguarded.py"
    script.write_text("import math\nfrom tensortune.measure.pool import WorkerPool\n"
                      "print('script ran')\n"
                      f"with WorkerPool(2, preload={preload!r}) as pool:\n"
                      "    print(pool.map(math.sqrt, [4.0, 9.0], timeout_s=60))\n")
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["script ran", "[2.0, 3.0]"]


# -- builder and runner ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def target():
    return default_target(2)


@pytest.fixture(scope="module")
def good(target):
    task = Task(WORKLOAD, target)
    config = task_space(task).sample(np.random.default_rng(3))
    return MeasureInput(task, config)


@pytest.fixture(scope="module")
def builder():
    with LocalBuilder(workers=2, timeout_s=20.0) as b:
        yield b


@pytest.fixture(scope="module")
def runner():
    with LocalRunner(SETTINGS) as r:
        yield r


def faulty(target, name: str) -> MeasureInput:
    return MeasureInput(Task(WORKLOAD, target, f"tests.faulty_templates:{name}"), Config(variant=0))


def test_import_does_not_load_tvm():
    import subprocess
    import sys

    code = "import sys, tensortune.measure; assert 'tvm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(__file__)))


def test_good_candidate_builds_runs_and_verifies(builder, runner, good):
    (build,) = builder.build([good])
    assert build.error is ErrorKind.NONE, build.message
    assert build.path.endswith(".so") and os.path.exists(build.path) and build.build_s > 0
    (result,) = runner.run([good], [build])
    assert result.ok and result.verified, result.message
    assert len(result.costs) == SETTINGS.repeat and all(c > 0 for c in result.costs)
    assert result.run_s > 0 and result.build_s == build.build_s
    assert abs(result.timestamp - time.time()) < 60
    (unverified,) = runner.run([good], [build], verify=[False])
    assert unverified.ok and not unverified.verified


def test_invalid_config_is_reported_and_passed_through(builder, runner, good):
    space = task_space(good.task)
    # a 32x32 register tile is twice what the template allows
    config = Config({**dict(space.get(0)), "tile_i": (1, 1, 1, 32), "tile_j": (1, 1, 1, 32)})
    assert config in space
    bad = MeasureInput(good.task, config)
    builds = builder.build([bad, good])
    assert builds[0].error is ErrorKind.INVALID_CONFIG and "register tile" in builds[0].message
    assert builds[0].path is None and builds[1].error is ErrorKind.NONE
    results = runner.run([bad, good], builds)
    assert results[0].error is ErrorKind.INVALID_CONFIG and results[0].message == builds[0].message
    assert results[0].run_s == 0 and not results[0].costs and results[0].mean == float("inf")
    assert results[1].ok


@pytest.mark.parametrize("name, error, message", [
    ("crash", ErrorKind.RUNTIME_ERROR, "SIGSEGV"),
    ("hang", ErrorKind.TIMEOUT, "3 s"),
    ("wrong", ErrorKind.WRONG_RESULT, "max abs error"),
])
def test_faulty_candidate_is_caught_and_runner_survives(builder, runner, good, target, name, error,
                                                        message):
    bad = faulty(target, name)
    builds = builder.build([bad, good])
    assert [b.error for b in builds] == [ErrorKind.NONE, ErrorKind.NONE], builds
    start = time.monotonic()
    results = runner.run([bad, good], builds)
    assert time.monotonic() - start < 30
    assert results[0].error is error and message in results[0].message, results[0]
    assert not results[0].ok and not results[0].verified
    assert results[1].ok and results[1].verified, results[1]


def test_builder_timeout_and_crash_leave_builder_usable(target, good):
    with LocalBuilder(workers=1, timeout_s=2.0) as b:
        builds = b.build([faulty(target, "slow_build"), faulty(target, "crash_build"), good])
    assert builds[0].error is ErrorKind.TIMEOUT and builds[0].path is None
    assert builds[1].error is ErrorKind.COMPILE_ERROR and "SIGSEGV" in builds[1].message
    assert builds[2].error is ErrorKind.NONE and builds[2].path
    assert not os.path.exists(b.workdir)  # close() removed its own temporary directory


def test_a_batch_limit_replaces_the_builder_limit(target, good):
    with LocalBuilder(workers=1, timeout_s=60.0) as b:
        start = time.monotonic()
        builds = b.build([faulty(target, "slow_build"), good], 1.5)
        assert time.monotonic() - start < 30  # not the builder's 60 s
        assert builds[0].error is ErrorKind.TIMEOUT and "1.5 s" in builds[0].message
        assert builds[1].error is ErrorKind.NONE and builds[1].path


class FakeRunner:
    """Times nothing: the kind of double the search's tests inject."""

    def run(self, inputs, builds, verify=None):
        return [MeasureResult((1e-3,)) for _ in inputs]


def test_runner_protocol_admits_local_and_fake_runners():
    assert isinstance(LocalRunner(SETTINGS), Runner)  # no worker starts before the first run
    assert isinstance(FakeRunner(), Runner)
    assert not isinstance(object(), Runner)


ZEN5_FLAGS = ("flags\t\t: fpu sse2 avx fma avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni "
              "avx512_bf16\n")
ZEN3_FLAGS = "processor\t: 0\nflags\t\t: fpu sse2 avx fma avx2 vaes\n"


def test_missing_host_features_name_what_a_target_needs_and_the_cpu_lacks():
    from tensortune.workload import missing_host_features

    zen5 = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}
    assert "avx512f" in missing_host_features(zen5, ZEN3_FLAGS)
    assert missing_host_features(zen5, ZEN5_FLAGS) == []
    assert missing_host_features({**zen5, "mcpu": "znver3"}, ZEN3_FLAGS) == []
    assert missing_host_features({"kind": "llvm"}, ZEN3_FLAGS) == []  # generic x86-64
    assert missing_host_features({"kind": "cuda", "arch": "sm_90"}, ZEN3_FLAGS) == []


def test_check_timeable_is_the_one_verdict_on_what_this_host_can_time():
    from tensortune.workload import UntimeableTarget, check_timeable, untimeable_reason

    zen5 = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}
    with pytest.raises(UntimeableTarget, match="znver5 uses avx512f, .*this CPU lacks; do X"):
        check_timeable(zen5, "do X", cpuinfo=ZEN3_FLAGS)
    check_timeable(zen5, cpuinfo=ZEN5_FLAGS)
    check_timeable({"kind": "llvm"}, cpuinfo=ZEN3_FLAGS)
    cuda = {"kind": "cuda", "arch": "sm_90"}
    with pytest.raises(ValueError, match="CUDA target"):
        check_timeable(cuda, cpuinfo=ZEN5_FLAGS)
    assert untimeable_reason(cuda, ZEN5_FLAGS, cuda_here=True) == ""  # a GPU host's runner


def test_a_target_this_host_cannot_execute_is_refused_not_crashed_through(monkeypatch):
    from tensortune.measure import runner as runner_mod
    from tensortune.tuner import tune_task
    from tensortune.workload import task as task_mod

    # pretend the host is an AVX2 machine, whatever it really is
    real = task_mod.missing_host_features
    monkeypatch.setattr(task_mod, "missing_host_features",
                        lambda target, cpuinfo=None: real(target, ZEN3_FLAGS))
    monkeypatch.setattr("tensortune.workload.missing_host_features",
                        task_mod.missing_host_features)
    task = Task(Matmul(m=16, n=16, k=16), {"kind": "llvm", "mcpu": "znver5", "num-cores": 2})
    with pytest.raises(ValueError, match="avx512f, .*which this CPU lacks"):
        tune_task(task, 2, tuner="random")
    inp = MeasureInput(task, task_space(task).get(0))
    with runner_mod.LocalRunner(SETTINGS) as runner:
        build = BuildResult("/nonexistent.so", 0.1)
        (res,) = runner.run([inp], [build])
    assert res.error is ErrorKind.RUNTIME_ERROR and "znver5 uses avx512f" in res.message


# -- contention ------------------------------------------------------------------------------------

def test_contention_is_other_processes_busy_cores_over_a_long_enough_window():
    from tensortune.measure.runner import contention

    # 1 s of wall time, 1.5 s of machine CPU, 0.5 s of it ours: others kept one core busy
    assert contention((0.0, 10.0, 1.0), (1.0, 11.5, 1.5)) == pytest.approx(1.0)
    assert contention((0.0, 10.0, 1.0), (1.0, 10.2, 1.5)) == 0.0  # tick rounding, never < 0
    assert contention((0.0, 10.0, 1.0), (0.05, 11.0, 1.0)) is None  # too short for 10 ms ticks
    assert contention(None, (1.0, 11.5, 1.5)) is None


def test_a_candidate_timed_beside_busy_processes_is_retimed_then_marked(builder, good):
    import subprocess
    import sys

    # one kernel thread and one spinning neighbour: oversubscribed cores would make TVM's
    # spinning thread pool crawl for seconds, which is the point but too slow for a test
    settings = MeasureSettings(threads=1, run_timeout_s=20.0, number=1, repeat=2,
                               min_repeat_ms=150, warmup=1, max_contention=0.5,
                               contention_retries=1)
    (build,) = builder.build([good])
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"])]
    try:
        time.sleep(0.5)
        with LocalRunner(settings) as r:
            (result,) = r.run([good], [build])
    finally:
        for p in spin:
            p.kill()
            p.wait()
    assert result.ok and result.verified, result.message
    assert "busy cores of other processes" in result.message
    assert result.run_s >= 2 * 2 * 0.150  # both attempts' timing runs are counted


@pytest.mark.parametrize("has_ld", [True, False])
def test_fast_link_makes_a_library_tvm_runs_with_ld_or_falls_back_to_tvms_linker(
        tmp_path, monkeypatch, has_ld):
    import shutil

    import tvm
    from tvm import te
    from tvm.support import cc as tvm_cc

    from tensortune.measure import link

    calls = []
    real_create_shared = tvm_cc.create_shared
    monkeypatch.setattr(tvm_cc, "create_shared", lambda *a, **k: calls.append(a) or
                        real_create_shared(*a, **k))
    if not has_ld:
        real_which = shutil.which
        monkeypatch.setattr(link.shutil, "which", lambda n: None if n == "ld" else real_which(n))
    a = te.placeholder((64,), name="a")
    b = te.compute((64,), lambda i: te.exp(a[i]) * 2.0, name="b")
    lib = tvm.compile(te.create_prim_func([a, b]), target="llvm")
    path = str(tmp_path / "lib.so")
    lib.export_library(path, fcompile=link.fast_link)
    assert len(calls) == (0 if has_ld else 1)  # ld itself, or g++ through TVM when ld is missing
    x = np.random.default_rng(0).random(64, dtype="float32")
    out = tvm.runtime.tensor(np.zeros(64, "float32"))
    tvm.runtime.load_module(path)["main"](tvm.runtime.tensor(x), out)
    np.testing.assert_allclose(out.numpy(), np.exp(x) * 2.0, rtol=1e-5)


def test_fast_link_names_the_linkers_complaint(tmp_path):
    from tensortune.measure.link import fast_link

    bad = tmp_path / "bad.o"
    bad.write_bytes(b"not an object file")
    with pytest.raises(RuntimeError, match="ld failed"):
        fast_link(str(tmp_path / "x.so"), [str(bad)])


THREADS_IN_ONE_CORE = """
import os
core = max(os.sched_getaffinity(0))
os.sched_setaffinity(0, {core})  # first: threads started later (numpy's too) inherit it
import numpy as np
from tensortune.measure import use_threads
use_threads(2)
import tvm
from tvm.script import tirx as T

@T.prim_func
def add_one(a: T.Buffer((4096,), "float32")):
    T.func_attr({"global_symbol": "main"})
    for i in T.parallel(4096):
        a[i] = a[i] + 1.0

lib = tvm.compile(tvm.IRModule({"main": add_one}), target={"kind": "llvm"})
lib["main"](tvm.runtime.tensor(np.zeros(4096, "float32")))
tasks = os.listdir(f"/proc/{os.getpid()}/task")
print(core, len(tasks), sorted({c for t in tasks for c in os.sched_getaffinity(int(t))}))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to leave one")
def test_kernel_threads_stay_on_the_cores_their_process_was_given(tmp_path):
    """A measurement worker pinned to its device's cores keeps TVM's threads there: TVM, left
    to pin them itself, widens the calling thread to every core of the machine."""
    script = tmp_path / "one_core.py"  # a file: TVMScript reads the function's source
    script.write_text(THREADS_IN_ONE_CORE)
    env = {k: v for k, v in os.environ.items() if k != "TVM_BIND_THREADS"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=env, check=True).stdout.split(maxsplit=2)
    core, threads, allowed = int(out[0]), int(out[1]), out[2].strip()
    assert threads >= 2  # the pool started its worker
    assert allowed == f"[{core}]"


def test_a_models_function_with_constant_weights_is_timed_cold_one_call_a_repeat(builder, good):
    """A function whose weights are a model's constants (Relax's ``layout_free_buffers``) is
    timed as a model runs it: TVM's flush of every argument but the first before each single
    call, ``cold_repeat`` times; an operator, a weight read first, or ``cold_weights=False``
    keep the warm timing."""
    import dataclasses

    from tensortune.measure.runner import times_cold, timing_job
    from tensortune.space import task_seeds
    from tensortune.workload import PrimFuncWorkload

    from tvm import te

    a, b = te.placeholder((32, 32), name="A"), te.placeholder((32, 32), name="B")
    k = te.reduce_axis((0, 32), name="k")
    c = te.compute((32, 32), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    func = te.create_prim_func([a, b, c])
    weights = PrimFuncWorkload.from_prim_func(func.with_attr("layout_free_buffers", [1]))
    table_first = PrimFuncWorkload.from_prim_func(func.with_attr("layout_free_buffers", [0]))
    assert weights.constant_inputs == (1,) and table_first.constant_inputs == (0,)
    assert good.task.workload.constant_inputs == ()
    settings = dataclasses.replace(SETTINGS, cold_repeat=5)
    task = Task(weights, good.task.target)
    cold = MeasureInput(task, task_seeds(task, task_space(task))[0])
    assert times_cold(cold, settings)
    assert timing_job(cold, settings)["preproc"] == "cache_flush_cpu_non_first_arg"
    assert not times_cold(MeasureInput(Task(table_first, good.task.target), cold.config),
                          settings)
    assert not times_cold(good, settings)
    assert not times_cold(cold, dataclasses.replace(settings, cold_weights=False))

    (build,) = builder.build([cold])
    assert build.error is ErrorKind.NONE, build.message
    with LocalRunner(settings) as runner:
        (result,) = runner.run([cold], [build])
    assert result.ok and result.verified, result.message
    assert len(result.costs) == 5 and all(c > 0 for c in result.costs)
