"""The datasets kept in the repository (``data/cpu.jsonl.gz``, measured on the project's Xeon,
whose records say mcpu rocketlake, timed in 2 sessions; ``data/cpu-zen3.jsonl.gz`` and
``data/cpu-spr.jsonl.gz``, ResNet-18's tasks on a Zen 3 and on a Sapphire Rapids-class Xeon,
timed in 3 sessions; ``data/cpu-spr-zoo.jsonl.gz``, ResNet-50's, VGG-11's and SqueezeNet 1.1's
tasks on that Xeon, ``data/cpu-spr-zoo2.jsonl.gz``, GoogLeNet's and MobileNet V1's, and
``data/cpu-spr-zoo3.jsonl.gz``, DenseNet-121's, each timed in 2 sessions): they load, cover the
task sources the cost-model evaluation needs, and their stored (packed) hardware rows cover
every record and match what the extractor computes now."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tensortune.dataset import features_path, load_dataset, record_sessions, session_noise
from tensortune.features import make_extractor
from tensortune.features.store import FeatureStore

DATA = Path(__file__).resolve().parents[2] / "data" / "cpu.jsonl.gz"
ZEN3 = DATA.with_name("cpu-zen3.jsonl.gz")
SPR = DATA.with_name("cpu-spr.jsonl.gz")
ZOO = DATA.with_name("cpu-spr-zoo.jsonl.gz")
ZOO2 = DATA.with_name("cpu-spr-zoo2.jsonl.gz")
ZOO3 = DATA.with_name("cpu-spr-zoo3.jsonl.gz")


@pytest.fixture(scope="module")
def dataset():
    if not DATA.exists():
        pytest.fail(f"{DATA} is missing: regenerate it as docs/datasets.md says")
    return load_dataset(DATA)


def test_the_dataset_covers_benchmark_and_model_tasks(dataset):
    sources = {t.info.source for t in dataset}
    assert {"benchmark", "resnet18", "mobilenet_v2", "bert_base"} <= sources
    assert {t.name for t in dataset if t.info.source == "benchmark"} == {
        "conv2d_C7", "conv2d_C12", "matmul_512", "dense_128x768x3072"}
    for t in dataset:
        assert t.n_ok >= 8, t.name
        assert 0 < t.best_cost < 1.0
    # measured with 2 threads on a machine with a 400+ GFLOP/s peak: the best kernels are fast
    assert dataset.get("matmul_512").best_gflops > 100


def test_every_config_of_the_dataset_was_timed_in_two_sessions(dataset):
    noise = session_noise(dataset)
    assert {z.sessions for z in noise} == {2}
    assert all(z.configs == t.n_ok for z, t in zip(noise, dataset))
    # one session ranks the other's costs almost perfectly: the labels are not what models miss
    assert 0.95 < np.mean([z.top10 for z in noise if z.top10 is not None]) <= 1.0


def test_stored_hardware_rows_match_the_extractor(dataset):
    stored = FeatureStore(features_path(DATA), read_only=True).wrap(make_extractor("hardware"))
    data = dataset.get("conv2d_C7")
    inputs = [i for i in data.inputs if i in stored][:3]
    assert len(inputs) == 3, "the feature store lacks conv2d_C7's rows"
    fresh = make_extractor("hardware").extract(inputs)
    np.testing.assert_allclose(stored.extract(inputs), fresh, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("path,mcpu", [(ZEN3, "znver3"), (SPR, "sapphirerapids")],
                         ids=["zen3", "spr"])
def test_resnet18_datasets_of_other_machines_have_every_row_and_three_sessions(path, mcpu):
    data = load_dataset(path)
    assert len(data) == 16 and {t.info.source for t in data} == {"resnet18"}
    assert {t.task.target["mcpu"] for t in data} == {mcpu}
    assert all(t.n_ok >= 38 for t in data)
    stored = FeatureStore(features_path(path), read_only=True).wrap(make_extractor("hardware"))
    assert all(i in stored for t in data for i in t.inputs)
    dense = data.get("resnet18.fused_matmul_add9")
    np.testing.assert_allclose(stored.extract(dense.inputs[:2]),
                               make_extractor("hardware").extract(dense.inputs[:2]),
                               rtol=1e-4, atol=1e-4)
    noise = session_noise(data)
    assert {z.sessions for z in noise} == {3} and all(z.configs >= 38 for z in noise)
    assert all(len(r.costs) >= 9 for t in data for r in t.results if r.ok)
    assert 0.9 < np.mean([z.top10 for z in noise]) <= 1.0


@pytest.mark.parametrize("path,sources,size", [
    (ZOO, {"resnet50", "vgg11", "squeezenet1_1"}, 53), (ZOO2, {"googlenet", "mobilenet_v1"}, 67),
    (ZOO3, {"densenet121"}, 62)], ids=["zoo", "zoo2", "zoo3"])
def test_the_zoo_datasets_join_the_main_one_as_more_training_tasks(dataset, path, sources, size):
    zoo = load_dataset(path)
    assert {t.info.source for t in zoo} == sources
    assert len(zoo) == size and all(t.n_ok >= 30 for t in zoo)
    assert {t.task.target["mcpu"] for t in zoo} == {"sapphirerapids"}
    stored = FeatureStore(features_path(path), read_only=True).wrap(make_extractor("hardware"))
    assert all(i in stored for t in zoo for i in t.inputs)
    sessions = record_sessions(path)
    assert all(len(sessions[(t.task.key, i.config)]) == 2
               for t in zoo for i, r in zip(t.inputs, t.results) if r.ok)
    # in the first zoo dataset one config's second build overran its time limit: recorded as
    # such, its first timing kept
    noise = session_noise(zoo)
    assert sum(z.sessions == 2 for z in noise) >= len(zoo) - 1
    assert 0.95 < np.mean([z.top10 for z in noise if z.top10 is not None]) <= 1.0
    joined = dataset.join(zoo)  # what `costmodel compare --also` evaluates
    assert len(joined) == len(dataset) + len(zoo) and len(set(joined.names)) == len(joined)


def test_a_stored_row_the_loop_map_undercounts_covers_the_workload():
    # a config vectorized along a strided axis: the compiler unrolls a loop into copies the map
    # cannot place, and the counts found cover 1/16 of the FLOPs; the stored row (version 2)
    # is scaled up to them, as the extractor now computes it
    from tensortune.features.hardware_cpu import FEATURE_NAMES

    task = load_dataset(ZOO).get("squeezenet1_1.fused_conv2d3_add2_relu2")
    short = [i for i in task.inputs if i.config["vector_axis"] == "yy"
             and i.config["tile_yy"] == (1, 1, 1, 55) and i.config["tile_ff"] == (8, 4, 2, 1)]
    assert len(short) == 1
    stored = FeatureStore(features_path(ZOO), read_only=True).wrap(make_extractor("hardware"))
    row = stored.extract(short)[0]
    np.testing.assert_allclose(row, make_extractor("hardware").extract(short)[0],
                               rtol=1e-4, atol=1e-4)
    assert row[FEATURE_NAMES.index("fp_work_ratio")] == pytest.approx(1 / 16, rel=1e-3)
    flops = task.task.workload.flops
    assert row[FEATURE_NAMES.index("log_fp_lanes")] == pytest.approx(np.log2(1 + flops), rel=1e-4)


def test_the_repository_keeps_its_feature_rows_packed_and_its_data_small():
    stores = sorted(DATA.parent.glob("*.features"))
    assert len(stores) == 6
    for store in stores:  # `dataset features` packs what it computed
        assert not list(store.glob("*.jsonl")) and list(store.glob("*.jsonl.gz")), store
    kept = [f for f in DATA.parent.rglob("*") if f.name.endswith((".gz", ".tasks.json"))]
    assert sum(f.stat().st_size for f in kept) < 5 * 2**20  # "a few MB at most"
