"""One contract over each registry: every search strategy (``search.STRATEGIES``) and every cost
model (``cost_model.MODELS``) is held to the same checks, and whatever reads the registries (the
tuner names, the settings, the evaluation harness, the CLI's help) agrees with them."""
from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tensortune.cost_model import MODELS, CostModel, Prescreened, XGBoostModel, as_cost_model
from tensortune.features import make_extractor
from tensortune.measure.types import MeasureInput
from tensortune.records import Record
from tensortune.search import STRATEGIES, check_options
from tensortune.settings import SearchSettings
from tensortune.space import Config, task_space
from tensortune.workload import Matmul, Task

TASK = Task(Matmul(m=32, n=48, k=64), {"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
SPACE = task_space(TASK)
DATA = Path(__file__).resolve().parents[1] / "data"


class Smooth(CostModel):
    """A model that knows a smooth landscape over the knob vector (higher = faster)."""

    trained = True

    def __init__(self):
        self.weights = np.random.default_rng(5).normal(size=len(SPACE.knob_vector(SPACE.get(0))))
        self.scored = 0

    def fit(self, inputs, results) -> None:
        pass

    def predict(self, inputs) -> np.ndarray:
        self.scored += len(inputs)
        return np.array([-float((SPACE.knob_vector(i.config) @ self.weights - 3.0) ** 2)
                         for i in inputs])


def small(strategy, settings: SearchSettings) -> SearchSettings:
    """``settings`` with every integer option of ``strategy`` at most 3: a quick search."""
    values = strategy.values(settings)
    return strategy.configure(settings, **{k: min(v, 3) for k, v in values.items()
                                           if isinstance(v, int) and not isinstance(v, bool)})


# -- search strategies -------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(STRATEGIES))
def test_strategy_proposes_valid_distinct_unmeasured_configs_within_its_budget(name):
    strategy = STRATEGIES[name]
    assert strategy.name == name and strategy.summary and "\n" not in strategy.summary
    settings = small(strategy, SearchSettings())
    exclude = frozenset(SPACE.sample_many(20, np.random.default_rng(1)))
    seeds = SPACE.sample_many(3, np.random.default_rng(2))
    for model in (None, Smooth()) if strategy.guided else (None,):
        out = strategy(SPACE, model, TASK, 12, exclude, np.random.default_rng(3), settings, seeds)
        assert len(out) == 12 and len(set(out)) == 12
        assert all(isinstance(c, Config) and c in SPACE for c in out)
        assert not set(out) & exclude
        again = strategy(SPACE, model, TASK, 12, exclude, np.random.default_rng(3), settings,
                         seeds)
        assert again == out  # the same seed proposes the same configs
    assert strategy(SPACE, None, TASK, 0, exclude, np.random.default_rng(3), settings) == []


@pytest.mark.parametrize("name", [n for n, s in STRATEGIES.items() if s.guided])
def test_guided_strategy_finds_what_its_model_likes_and_searches_through_a_prescreen(name):
    strategy = STRATEGIES[name]
    settings = dataclasses.replace(small(strategy, SearchSettings()), epsilon=0.0)
    model = Smooth()
    out = strategy(SPACE, model, TASK, 8, frozenset(), np.random.default_rng(0), settings)
    random = SPACE.sample_many(8, np.random.default_rng(0))
    assert max(model.predict([MeasureInput(TASK, c) for c in out])) >= \
        max(model.predict([MeasureInput(TASK, c) for c in random]))
    cheap, costly = Smooth(), Smooth()
    out = strategy(SPACE, Prescreened(cheap, costly, shortlist=2), TASK, 4, frozenset(),
                   np.random.default_rng(0), settings)
    # the walk is on the cheap model; the costly one ranks the shortlist only
    assert len(set(out)) == 4 and 0 < costly.scored <= 2 * 4 and cheap.scored >= costly.scored


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_strategy_declares_its_options_and_refuses_unknown_ones_by_name(name):
    strategy = STRATEGIES[name]
    fields = {f.name: f.default for f in dataclasses.fields(SearchSettings)}
    for option, declared in strategy.options.items():
        assert declared.help and "\n" not in declared.help
        if declared.setting:  # held in a settings field: same default, one source
            assert fields[declared.setting] == declared.default
    assert set(strategy.values(SearchSettings())) == set(strategy.options)
    with pytest.raises(ValueError, match=f"'bogus'.*{name!r}"):
        strategy.configure(SearchSettings(), bogus=1)
    with pytest.raises(ValueError, match=f"'bogus'.*{name!r}"):
        check_options(STRATEGIES, {name: {"bogus": 1}})
    with pytest.raises(ValueError, match=f"'bogus'.*{name!r}"):  # set by hand, refused on use
        strategy.values(SearchSettings(options={name: {"bogus": 1}}))
    for option, declared in strategy.options.items():  # each known one can be set
        if declared.setting:
            continue
        settings = strategy.configure(SearchSettings(), **{option: declared.default})
        assert strategy.values(settings)[option] == declared.default
        with pytest.raises(ValueError, match=f"{option!r}"):
            strategy.configure(SearchSettings(), **{option: "many"})


def test_a_loop_refuses_options_of_an_unknown_strategy_before_any_work():
    from tensortune.settings import Settings
    from tensortune.tuner import make_loop

    with pytest.raises(ValueError, match="'tabu'"):
        check_options(STRATEGIES, {"tabu": {}})
    settings = Settings(search=SearchSettings(options={"tabu": {}}))
    with pytest.raises(ValueError, match="'tabu'"):
        make_loop("random", None, settings)


# -- cost models -------------------------------------------------------------------------------

def real_records(path: Path, op: str, n: int, ok_only: bool = False):
    """The first ``n`` records (successful ones only, with ``ok_only``) of the first ``op`` task
    in a records file: inputs, results."""
    inputs, results, key = [], [], None
    with gzip.open(path, "rt") as f:
        for line in f:
            obj = json.loads(line)
            if (obj["workload"]["op"] != op or key not in (None, obj["task"])
                    or (ok_only and obj["error"] != "none")):
                continue
            key = obj["task"]
            rec = Record.from_json(obj)
            inputs.append(rec.to_input())
            results.append(rec.to_result())
            if len(inputs) == n:
                break
    return inputs, results


@pytest.fixture(scope="module")
def cpu_records():
    return real_records(DATA / "cpu.jsonl.gz", "matmul", 24)


def records_for(spec, cpu_records):
    if "cuda" not in spec.features:
        return cpu_records
    if shutil.which("nvcc") is None:
        pytest.skip("hardware_cuda features need nvcc")
    return real_records(DATA / "cuda-h100-sm90.jsonl.gz", "matmul", 6, ok_only=True)


@pytest.mark.parametrize("name", list(MODELS))
def test_cost_model_fits_real_records_predicts_and_declares_its_capabilities(name, cpu_records):
    spec = MODELS[name]
    assert spec.name == name and spec.summary and "\n" not in spec.summary
    inputs, results = records_for(spec, cpu_records)
    assert sum(r.ok for r in results) >= 4
    model = spec.make(make_extractor(spec.features), seed=0)
    assert isinstance(model, CostModel)
    model.fit(inputs, results)
    scores = model.predict(inputs)
    assert isinstance(scores, np.ndarray) and scores.shape == (len(inputs),)
    assert np.all(np.isfinite(scores))
    # the capabilities the loop, the search and hardware-free tuning read, declared
    assert model.trained is True  # fitted on enough records (or pretrained)
    assert model.extractor.name == spec.features
    assert model.compiles == any(p in ("hardware", "hardware_cuda")
                                 for p in spec.features.split("+"))
    assert model.prescreen is None and model.costly is model and model.shortlist >= 1
    assert model.label_scale is None or model.label_scale > 0
    model.close()


@pytest.mark.parametrize("name", [n for n, s in MODELS.items() if s.fresh])
def test_fresh_cost_model_saves_loads_and_guides_a_search_as_a_prescreens_costly_part(
        name, cpu_records, tmp_path):
    spec = MODELS[name]
    inputs, results = cpu_records
    fresh = spec.make(make_extractor("knob"), seed=0)
    assert not fresh.trained  # nothing learnt yet: the loop explores before asking it
    fresh.fit(inputs, results)
    fresh.save(tmp_path / "m")
    back = type(fresh).load(tmp_path / "m")
    np.testing.assert_allclose(back.predict(inputs), fresh.predict(inputs), rtol=1e-5)
    wrapped = Prescreened(XGBoostModel(make_extractor("knob"), seed=0), fresh, shortlist=2)
    wrapped.fit(inputs, results)
    assert wrapped.costly is fresh and wrapped.prescreen is not None
    assert (wrapped.trained, wrapped.extractor, wrapped.label_scale) == \
        (fresh.trained, fresh.extractor, fresh.label_scale)
    space = task_space(inputs[0].task)
    settings = small(STRATEGIES["sa"], SearchSettings())
    out = STRATEGIES["sa"](space, wrapped, inputs[0].task, 4, frozenset(i.config for i in inputs),
                           np.random.default_rng(0), settings)
    assert len(set(out)) == 4


def test_an_object_of_another_class_is_adapted_with_what_it_declares():
    class Foreign:
        trained, label_scale = True, 2.0

        def fit(self, inputs, results):
            pass

        def predict(self, inputs):
            return np.ones(len(inputs))

    model = as_cost_model(Foreign())
    assert isinstance(model, CostModel) and as_cost_model(model) is model
    assert (model.trained, model.label_scale, model.compiles, model.prescreen) == \
        (True, 2.0, False, None)
    assert model.predict([MeasureInput(TASK, SPACE.get(0))]).tolist() == [1.0]
    assert as_cost_model(None) is None


# -- what reads the registries -----------------------------------------------------------------

def test_tuner_names_settings_and_harness_read_the_registries():
    from tensortune.evaluation import MODELS as HARNESS, make_model
    from tensortune.tuner import MODEL_TUNERS, SEARCHES, TUNERS

    assert MODEL_TUNERS == tuple(n for n, s in MODELS.items() if s.fresh)
    assert SEARCHES == tuple(n for n, s in STRATEGIES.items() if s.guided)
    assert set(TUNERS) == set(MODEL_TUNERS) | {n for n, s in STRATEGIES.items() if not s.guided}
    assert len(set(TUNERS)) == len(TUNERS)  # no model and strategy share a name
    assert set(HARNESS) == {h for s in MODELS.values() if s.fresh for h in s.harness_names}
    assert {"xgb-rank", "xgb-reg", "gtuner", "ensemble"} <= set(HARNESS)
    for name in HARNESS:
        assert isinstance(make_model(name, make_extractor("knob")), CostModel)


@pytest.mark.parametrize("command, names", [
    (["tune-op"], ("TUNERS", "SEARCHES")),
    (["tune-model"], ("TUNERS",)),
    (["measure", "export"], ("TUNERS", "SEARCHES")),
    (["costmodel", "compare"], ("HARNESS",)),
])
def test_cli_help_lists_every_registered_name(command, names):
    import tensortune.tuner as tuner
    from tensortune.cli import app
    from tensortune.evaluation import MODELS as HARNESS

    lists = {"TUNERS": tuner.TUNERS, "SEARCHES": tuner.SEARCHES, "HARNESS": HARNESS}
    res = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "400"})
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    for key in names:
        for name in lists[key]:
            assert f"{name} " in text or f"{name}," in text or f"{name})" in text, (key, name)
