"""Whole-model tasks: PrimFunc workloads, extraction (de-duplication, weights, batch-norm folding),
compilation with chosen configs, save/load, and the MetaSchedule database route, on the model's
own NCHW layout (``test_layout`` covers the NHWC default)."""
import json

import numpy as np
import pytest
import torch

from tensortune.frontend import from_torch
from tensortune.measure import ErrorKind, LocalBuilder, LocalRunner, MeasureInput, MeasureResult
from tensortune.records import Record, RecordWriter
from tensortune.settings import MeasureSettings
from tensortune.space import InvalidConfigError, apply_config, task_space
from tensortune.tasks import (CompiledModel, applied_functions, build_model,
                              compile_with_metaschedule, extract_tasks, fused_module,
                              list_untunable, prepare, scheduled_module, write_metaschedule_db)
from tensortune.workload import Conv2d, PrimFuncWorkload, Task, default_target, workload_from_dict


class Net(torch.nn.Module):
    """conv+BN+ReLU, then two identical 8->8 convolutions, pooling and a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)  # with bias: BN folds into conv + bias
        self.bn = torch.nn.BatchNorm2d(8)
        self.same1 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.same2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.stem(x)))
        x = torch.relu(self.same2(torch.relu(self.same1(x))))
        return self.fc(self.pool(x).flatten(1))


@pytest.fixture(scope="module")
def target():
    return default_target(2)


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    module = Net().eval()
    with torch.no_grad():
        module.bn.running_mean.uniform_(-0.5, 0.5)
        module.bn.running_var.uniform_(0.5, 2.0)
        module.bn.weight.uniform_(0.5, 2.0)
        module.bn.bias.uniform_(-0.5, 0.5)
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32"))
    with torch.no_grad():
        expected = module(x).numpy()
    return from_torch(module, (x,)), x.numpy(), expected


NCHW = "nchw"


@pytest.fixture(scope="module")
def tasks(net, target):
    return extract_tasks(net[0], target, graph=NCHW)


@pytest.fixture(scope="module")
def best(tasks):
    """One applicable random config per tunable task."""
    rng = np.random.default_rng(0)
    chosen = {}
    for t in tasks:
        if not t.tunable:
            continue
        space = task_space(t.task)
        for _ in range(100):
            config = space.sample(rng)
            try:
                apply_config(t.task, config, space)
            except InvalidConfigError:
                continue
            chosen[t.key] = config
            break
    return chosen


def _by_name(tasks, prefix):
    (task,) = [t for t in tasks if t.name.startswith(prefix)]
    return task


# -- extraction ------------------------------------------------------------------------------------

def test_batch_norm_is_folded_into_the_convolution(net, tasks, target):
    model = net[0]
    assert "batch_norm" in model.mod.script()
    prepared = prepare(model.mod, NCHW).script()
    # folded, not merely decomposed: decomposition would subtract the mean from the activations
    assert "batch_norm" not in prepared and "subtract" not in prepared
    assert not any("batch_norm" in t.name or "batch_norm" in t.task.workload.script for t in tasks)
    stem = _by_name(tasks, "fused_conv2d_add_relu")  # the folded BN is the conv's bias add
    assert stem.task.workload.input_shapes == [(1, 3, 16, 16), (8, 3, 3, 3), (1, 8, 1, 1)]


def test_identical_layers_are_one_task_weighted_by_calls(tasks):
    keys = [t.key for t in tasks]
    assert len(keys) == len(set(keys))
    same = [t for t in tasks if t.task.workload.input_shapes[:2] == [(1, 8, 16, 16), (8, 8, 3, 3)]]
    assert len(same) == 1 and same[0].weight == 2 and same[0].tunable
    assert sum(t.weight for t in tasks) == 6  # stem, 2 x same, pool (mean), reshape, dense
    assert all(t.weight == 1 for t in tasks if t is not same[0])


def test_tunable_and_untunable_tasks_say_why(tasks):
    untunable = list_untunable(tasks)
    assert [t.name for t in untunable] == ["reshape"]
    assert "a reshape" in untunable[0].reason and not untunable[0].tunable
    for t in tasks:
        if t.tunable:
            assert t.reason.startswith("cpu.generic:") and t.flops > 0
    dense = _by_name(tasks, "fused_matmul")
    assert dense.flops == 2 * 8 * 10 + 10  # matmul plus the bias add


# -- PrimFunc workloads --------------------------------------------------------------------------

def test_primfunc_workload_round_trips_and_its_key_ignores_names(tasks):
    w = _by_name(tasks, "fused_conv2d_add_relu").task.workload
    again = workload_from_dict(json.loads(json.dumps(w.to_dict())))
    assert again == w and again.key == w.key and again.name == w.name and again.dtype == "float32"
    renamed = PrimFuncWorkload(script=w.script.replace("param_0", "kernel"), name="other")
    assert renamed.script != w.script and renamed.key == w.key
    other = _by_name(tasks, "fused_matmul").task.workload
    assert other.key != w.key
    with pytest.raises(ValueError, match="does not parse"):
        PrimFuncWorkload(script="def nonsense(:")


def test_extracted_functions_key_as_their_parsed_scripts_and_travel_to_workers_as_json(
        tasks, monkeypatch):
    import tvm
    import tvm_ffi

    from tensortune.measure.builder import job_task, task_job
    from tensortune.workload import primfunc

    for t in tasks:  # extraction keeps the function its script was printed from: same key
        w = t.task.workload
        parsed = tvm.script.from_source(w.script)
        assert f"{tvm_ffi.structural_hash(parsed, map_free_vars=True) & (2**64 - 1):016x}" in w.key
    job = task_job(tasks[0].task, tir=True)
    assert "tir" in job["workload"] and "tir" not in task_job(tasks[0].task)["workload"]
    # a worker's first sight of the task: nothing known, nothing parsed, the JSON loaded
    monkeypatch.setattr(primfunc, "_KNOWN", primfunc.collections.OrderedDict())
    primfunc._parse.cache_clear()
    primfunc._structural_key.cache_clear()

    def refuse(_script):
        raise AssertionError("a job's function was parsed")

    monkeypatch.setattr(tvm.script, "from_source", refuse)
    try:
        again = job_task(json.loads(json.dumps(job)))
        assert again.key == tasks[0].task.key and "tir" not in again.workload.to_dict()
    finally:
        primfunc._parse.cache_clear()
        primfunc._structural_key.cache_clear()


def test_primfunc_reference_is_conv_plus_bias_plus_relu(tasks):
    w = _by_name(tasks, "fused_conv2d_add_relu").task.workload
    data, weight, bias = w.random_inputs(0)
    conv = Conv2d(n=1, c=3, h=16, w=16, filters=8, kh=3, kw=3, padding=1).reference(data, weight)
    np.testing.assert_allclose(w.reference(data, weight, bias), np.maximum(conv + bias, 0),
                               rtol=1e-5, atol=1e-5)


def test_functions_without_one_reduction_get_the_row_wise_space(tasks, target):
    reshape = _by_name(tasks, "reshape")  # untunable as a view, but the template still fits it
    space = task_space(Task(reshape.task.workload, target))
    assert {k.name for k in space.knobs} == {"rows", "vector", "parallel", "unroll"}
    # on a GPU, cuda.generic's rule for any function (threads, outputs per thread, unroll)
    cuda = {"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}}
    gpu = task_space(Task(reshape.task.workload, cuda, "cuda.generic"))
    assert [k.name for k in gpu.knobs] == ["threads", "elems", "unroll"]


def test_builder_and_runner_verify_primfunc_tasks_against_the_reference(tasks, best):
    task = _by_name(tasks, "fused_conv2d_add_relu").task
    inputs = [MeasureInput(task, best[task.key])]
    settings = MeasureSettings(number=1, repeat=1, min_repeat_ms=1, threads=2)
    with LocalBuilder(workers=1) as builder, LocalRunner(settings) as runner:
        (result,) = runner.run(inputs, builder.build(inputs))
    assert result.ok and result.verified, result.message
    record = Record.from_measure(inputs[0], result)
    assert Record.from_json(json.loads(json.dumps(record.to_json()))).workload == task.workload


# -- compiling with configs ------------------------------------------------------------------------

def test_build_with_configs_matches_torch_and_saves_and_loads(net, tasks, best, target, tmp_path):
    model, x, expected = net
    compiled = build_model(model, target, best, graph=NCHW)
    tuned_names = {name for t in tasks if t.key in best for name in t.functions}
    assert set(compiled.tuned) == tuned_names and len(tuned_names) == 4
    (got,) = compiled.run(x)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)

    saved = compiled.save(tmp_path / "net")
    loaded = CompiledModel.load(saved)
    assert loaded.inputs == model.inputs and loaded.outputs == model.outputs
    assert loaded.tuned == compiled.tuned
    np.testing.assert_array_equal(loaded.run(x)[0], got)
    stats = loaded.time(repeat=3)
    assert len(stats.costs) == 3 and 0 < stats.min <= stats.median
    with pytest.raises(ValueError, match=r"input x: expected shape \(1, 3, 16, 16\)"):
        loaded.run(x[:, :2])


def test_tuned_functions_are_the_scheduled_ones(net, tasks, best, target):
    mod, tuned = scheduled_module(net[0], target, best, graph=NCHW)
    plain = fused_module(net[0], target, NCHW)
    names = {gv.name_hint for gv in mod.get_global_vars()}
    for name in tuned:
        # a schedule that packs its constant weight runs as "<name>_prepacked" on packed data
        func = mod[name] if name in names else mod[name + "_prepacked"]
        assert func.attrs["tirx.is_scheduled"]
        assert "global_symbol" not in func.attrs
        assert func.script() != plain[name].script()  # tiled, parallel: not the default
    assert not any(n.endswith("_weight_prepack") for n in names)  # folded into constants
    untouched = [gv.name_hint for gv in mod.get_global_vars() if gv.name_hint not in tuned]
    assert "reshape" in untouched


def test_build_from_a_records_log_uses_each_tasks_best_record(net, tasks, best, target, tmp_path):
    model, x, expected = net
    log = tmp_path / "log.jsonl"
    tunable = [t for t in tasks if t.tunable]
    first = tunable[0]
    others = [c for c in task_space(first.task).sample_many(10, np.random.default_rng(1))
              if c != best[first.key]]
    with RecordWriter(log) as writer:
        for t in tunable:
            writer.append(MeasureInput(t.task, best[t.key]), MeasureResult((1e-4,), timestamp=1.0))
        # neither a slower config nor a failed one (however "fast") may be chosen
        writer.append(MeasureInput(first.task, others[0]), MeasureResult((5e-4,), timestamp=2.0))
        writer.append(MeasureInput(first.task, others[1]),
                      MeasureResult((), ErrorKind.RUNTIME_ERROR, "boom", timestamp=3.0))
    from_log, tuned = scheduled_module(model, target, log, graph=NCHW)
    from_mapping, _ = scheduled_module(model, target, best, graph=NCHW)
    assert set(tuned) == {name for t in tunable for name in t.functions}
    for name in first.functions:
        assert from_log[name].script() == from_mapping[name].script()
    compiled = build_model(model, target, log, graph=NCHW)
    np.testing.assert_allclose(compiled.run(x)[0], expected, rtol=1e-4, atol=1e-5)


# -- MetaSchedule database -----------------------------------------------------------------------

def test_metaschedule_database_applies_our_schedules(net, tasks, best, target, tmp_path):
    model, x, expected = net
    work_dir = write_metaschedule_db(tasks, best, tmp_path / "ms", costs={k: [2e-5] for k in best})
    tuned = {name for t in tasks if t.key in best for name in t.functions}
    assert set(applied_functions(work_dir, model, target, NCHW)) == tuned
    compiled = compile_with_metaschedule(work_dir, model, target, graph=NCHW)
    np.testing.assert_allclose(compiled.run(x)[0], expected, rtol=1e-4, atol=1e-5)
    lines = (work_dir / "database_tuning_record.json").read_text().splitlines()
    assert len(lines) == len(best)


def test_functions_without_a_config_get_their_seed_the_untuned_build_none(net, tasks, target):
    model, x, expected = net
    seeded = build_model(model, target, {}, graph=NCHW)
    tunable = {name for t in tasks if t.tunable for name in t.functions}
    assert seeded.tuned and set(seeded.tuned) <= tunable  # never a reshape (a view)
    np.testing.assert_allclose(seeded.run(x)[0], expected, rtol=1e-4, atol=1e-4)
    assert not build_model(model, target, None, graph=NCHW).tuned
