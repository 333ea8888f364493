"""The dataset kept in the repository (``data/cpu.jsonl.gz``, measured on the project machine):
it loads, covers the task sources the cost-model evaluation needs, and its stored hardware rows
match what the extractor computes now."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tensortune.dataset import features_path, load_dataset
from tensortune.features import make_extractor
from tensortune.features.store import FeatureStore

DATA = Path(__file__).resolve().parent.parent / "data" / "cpu.jsonl.gz"


@pytest.fixture(scope="module")
def dataset():
    if not DATA.exists():
        pytest.fail(f"{DATA} is missing: regenerate it as README 'Cost models and features' says")
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


def test_stored_hardware_rows_match_the_extractor(dataset):
    stored = FeatureStore(features_path(DATA), read_only=True).wrap(make_extractor("hardware"))
    data = dataset.get("conv2d_C7")
    inputs = [i for i in data.inputs if i in stored][:3]
    assert len(inputs) == 3, "the feature store lacks conv2d_C7's rows"
    fresh = make_extractor("hardware").extract(inputs)
    np.testing.assert_allclose(stored.extract(inputs), fresh, rtol=1e-4, atol=1e-4)
