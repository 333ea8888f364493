"""The facade: a model in, a tuned, saved, runnable module out.

    s = Session.from_zoo("resnet18")          # or from_torch(module, inputs), from_onnx(path)
    s.tune(trials=1000)                       # all tasks, one shared budget
    s.build(); s.save()                       # ~/.tensortune/runs/<run id>/module
    s.run(x); s.evaluate()                    # numpy in, numpy out; latency statistics
    Session.load(run_id).evaluate()

Every session is a run with an id and a directory holding its records log, its per-stage
timings (import, extract, tune, build, evaluate) and the saved module; a global records file
under the home directory is shared by all runs, so tuning a model again starts warm and skips
the tasks that are already tuned well enough.
"""
from __future__ import annotations

import dataclasses

import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..deploy import export_session
from ..frontend import from_onnx, from_torch
from ..measure import LocalBuilder, LocalRunner
from ..settings import Settings
from ..tasks import CompiledModel
from ..tasks.graph import GraphOptions
from ..tasks.profile import profile_model
from ..tasks.provenance import note_provenance
from ..tuner.stages import EXTRACT, Stage, drive
from ..workload import UntimeableTarget, check_timeable, default_target
from . import values
from .hardware_free import tune_hardware_free
from .measured import tune_measured
from .runs import RUN_FILE, SessionError, model_from_spec, task_label
from .values import BuiltModel, ExtractedTasks, ImportedModel, SavedRun, TunedRecords


class Session:
    """One model's journey: import, extract, tune, build, save, run, evaluate. A facade over
    the stages' values (``session.values``): it keeps the latest of each (``imported``,
    ``extracted``, ``tuned``, ``built``, ``saved``) and the run's bookkeeping."""

    def __init__(self, model, spec: dict, settings: Settings | None = None,
                 torch_module=None, example_inputs=None, import_s: float = 0.0):
        self.settings = settings or Settings.from_env()
        # a loaded run has no model: only its saved module
        self.imported = (ImportedModel(model, torch_module, example_inputs, import_s)
                         if model is not None else None)
        self.spec = spec
        # the whole-model rewrites (layout, Winograd: ``tasks.graph``); part of the spec, since
        # tasks, records and the saved module all depend on them
        self.graph = GraphOptions.of(spec.get("graph"))
        self.target = self.settings.target or default_target(self.settings.measure.threads)
        if self.target.get("kind") == "cuda":
            # their templates are the CPU's; on a GPU the two convolutions stay apart, a
            # grouped convolution keeps TOPI's form and attention its matmuls and softmax
            self.graph = dataclasses.replace(self.graph, expand_depthwise=False,
                                             grouped_conv=False, attention=False)
        spec["graph"] = self.graph.to_json()
        name = spec.get("name", "model")
        self.run_id = time.strftime("%Y%m%d-%H%M%S-") + f"{name}-{secrets.token_hex(3)}"
        self.run_dir = self.settings.home / "runs" / self.run_id
        self.stages: dict[str, float] = {"import": import_s}
        self.extracted: ExtractedTasks | None = None
        self.tuned = TunedRecords()
        self.built: BuiltModel | None = None
        self.saved: SavedRun | None = None
        self.results: dict = {}

    # -- the latest values, as the attributes callers know ---------------------------------------
    @property
    def model(self):
        """The imported model (``frontend.Model``); None for a loaded run."""
        return self.imported.model if self.imported is not None else None

    @property
    def tasks(self) -> list | None:
        """The extracted tasks, None before ``extract``."""
        return list(self.extracted.tasks) if self.extracted is not None else None

    @property
    def schedule(self):
        """The last measured tuning's ``ScheduleResult`` (None before one)."""
        return self.tuned.schedule

    @property
    def static(self):
        """Task key -> ``tuner.static.StaticResult`` of the hardware-free tuning."""
        return self.tuned.static

    @property
    def verified(self):
        """Task key -> the fastest timed of its best predicted configs (``verify_top``)."""
        return self.tuned.verified

    @property
    def compiled(self):
        """The built module (``tasks.CompiledModel``), None before ``build``."""
        return self.built.compiled if self.built is not None else None

    @compiled.setter
    def compiled(self, compiled) -> None:
        chosen = self.built.chosen if self.built is not None else None
        self.built = BuiltModel(compiled, chosen) if compiled is not None else None

    # -- import ---------------------------------------------------------------------------------
    @classmethod
    def from_torch(cls, module, example_inputs: tuple, name: str | None = None,
                   settings: Settings | None = None, graph=None) -> "Session":
        """Import a ``torch.nn.Module`` through torch.export and the Relax torch frontend;
        ``graph`` (``tasks.graph.GraphOptions``, a layout name or a dict; default NHWC with
        Winograd) chooses the whole-model rewrites it is compiled with."""
        start = time.perf_counter()
        model = from_torch(module, tuple(example_inputs), name=name)
        spec = {"source": "torch", "name": model.name, "graph": graph}
        return cls(model, spec, settings, module, tuple(example_inputs), time.perf_counter() - start)

    @classmethod
    def from_onnx(cls, path, input_shapes: dict | None = None,
                  settings: Settings | None = None, graph=None) -> "Session":
        """Import an ONNX file; an operator the frontend can't take is named in the error."""
        start = time.perf_counter()
        model = from_onnx(path, input_shapes)
        spec = {"source": "onnx", "path": str(Path(path).resolve()), "name": model.name,
                "graph": graph}
        return cls(model, spec, settings, import_s=time.perf_counter() - start)

    @classmethod
    def from_zoo(cls, name: str, batch: int = 1, image_size: int | None = None,
                 seq_len: int = 128, settings: Settings | None = None,
                 graph=None) -> "Session":
        """A model of the built-in zoo (random weights), imported from PyTorch; ``image_size``
        None: the model's own default (``zoo.default_image_size``: 224, YOLO 640, U-Net 256),
        which the run's spec records."""
        from ..zoo import default_image_size, zoo_model  # torch: imported only for the zoo

        if image_size is None:
            image_size = default_image_size(name)
        module, inputs = zoo_model(name, batch=batch, image_size=image_size, seq_len=seq_len)
        session = cls.from_torch(module, inputs, name=name, settings=settings, graph=graph)
        session.spec.update(source="zoo", batch=batch, image_size=image_size, seq_len=seq_len)
        return session

    # -- tuning -----------------------------------------------------------------------------------
    @property
    def records_path(self) -> Path:
        """The global records database shared by all runs."""
        return self.settings.home / "records.jsonl"

    def extract(self):
        """The model's distinct tunable functions with their weights (cached)."""
        self._need_model("extract tasks")
        if self.extracted is None:
            self.extracted = values.extract(self.imported, self.target, self.graph)
            self.stages["extract"] = self.extracted.extract_s
        return self.tasks

    def tune(self, trials: int, scheduler: str = "gradient", tuner: str = "xgb",
             features: str = "knob", well_tuned: int | None = None,
             on_step: Callable | None = None, on_result: Callable | None = None,
             cost_model: str = "fresh"):
        """Spend ``trials`` measurements across the tasks; returns a ``ScheduleResult``.

        A task whose records already hold ``well_tuned`` trials (default: its even share of
        this budget) is skipped; the others start warm from the global records. ``cost_model``
        ``pretrained`` starts each task from the shipped model (``tuner.make_loop``).
        """
        stages = self.tune_stages(trials, scheduler, tuner, features, well_tuned, on_step,
                                  on_result, cost_model)
        m = self.settings.measure
        # both start their worker processes on first use, after the checks have passed
        with LocalBuilder(m.build_workers, m.build_timeout_s) as builder, \
                LocalRunner(m) as runner:
            return drive(stages, builder, runner)

    def tune_stages(self, trials: int, scheduler: str = "gradient", tuner: str = "xgb",
                    features: str = "knob", well_tuned: int | None = None,
                    on_step: Callable | None = None, on_result: Callable | None = None,
                    cost_model: str = "fresh", claims=None):
        """``tune`` as stage requests (``tuner.stages``) for the multi-job scheduler
        (``tensortune.orchestrate``): the builder and the runner are the scheduler's.
        ``claims``: the job's ``tasks.claims.Claimant``, where jobs share tasks."""
        tasks = yield Stage(EXTRACT, lambda _: [t for t in self.extract() if t.tunable],
                            task="extract")
        if not tasks:
            raise SessionError(f"{self.model.name} has no tunable task")
        self._check_timeable("tune it --hardware-free (tune_hardware_free) or on a host "
                             "that runs the target")
        start = time.perf_counter()
        schedule = yield from tune_measured(tasks, self.settings, self.run_dir / "log.jsonl",
                                            self.records_path, trials, scheduler, tuner,
                                            features, well_tuned, on_step, on_result,
                                            cost_model, claims)
        self.stages["tune"] = self.stages.get("tune", 0.0) + time.perf_counter() - start
        # the hardware-free picks of an earlier call stay: the build prefers them, as before
        self.tuned = dataclasses.replace(self.tuned, schedule=schedule)
        self.built = None
        self._write_run()
        return schedule

    def tune_hardware_free(self, verify_top: int = 0, on_task: Callable | None = None,
                           model=None, effort: str = "full") -> dict:
        """Pick every task's config from the shipped cost model's predictions (``tuner.static``,
        Tuna's mode; for a CUDA target ``cost_model.pretrained.cuda_model``, over nvcc's PTX):
        candidates are compiled for their features, none is run. With
        ``verify_top`` the K best predicted configs of each task are timed here (only where
        this host can run the target) and the fastest is kept. ``effort="fast"`` skips the
        search: each task's seeds ranked by the cheap model, the best of a few register tiles
        compiled (four for the tasks that take most of the time, two for the rest) and ranked
        by the costly model (``tuner.static.predict_many``). Returns the counts
        (``compiled``, ``timed``) and the predicted latency of the tuned functions. ``model``
        replaces the shipped one (``tuner.pretrained_model``)."""
        if verify_top:
            self._check_timeable("--verify-top times candidates: tune without it")
        start, extracted = time.perf_counter(), self.extracted is not None
        self.tuned = tune_hardware_free(self.extract, self.target, self.settings,
                                        (self.run_dir / "log.jsonl", self.records_path),
                                        self.tuned, verify_top, on_task, model, effort)
        if not extracted:  # its own stage, as in ``tune``
            start += self.stages["extract"]
        summary = dict(self.tuned.summary)
        self.stages["tune"] = self.stages.get("tune", 0.0) + time.perf_counter() - start
        self.results["tuning"] = summary
        self.built = None
        self._write_run()
        return summary

    def _best(self):
        """What the build uses: the hardware-free picks (the timed best where verified), else
        the records (each task's best measured config), else nothing (TVM's defaults)."""
        return self.tuned.best(self.records_path)

    # -- build, save, load ------------------------------------------------------------------------------
    def build(self, tuned: bool = True, best: dict | None = None, cuda_graph: bool = True,
              keep: bool = True):
        """Compile the model, each task with its best record (``tuned=False``: TVM's defaults;
        ``best``: these configs by task key, e.g. a records index's picks, or a records log;
        ``cuda_graph``: a GPU build replays its kernels as one CUDA graph). ``keep=False``
        returns the build without making it the session's (e.g. an untuned one to compare
        with): ``compiled``, what ``save`` writes and the build stage's time stay as they were."""
        self._need_model("build")
        start = time.perf_counter()
        used = best if best is not None else self._best() if tuned else None
        built = values.build(self.imported, self.target, used, self.settings.measure.threads,
                             self.graph, cuda_graph, chosen=best)
        self._note_provenance(built.compiled, used)
        if keep:
            self.built = built
            self.stages["build"] = time.perf_counter() - start
        return built.compiled

    def save(self, directory: str | Path | None = None) -> Path:
        """Save the built module (default: the run directory's ``module``) and the run summary;
        the best schedules are also written as a MetaSchedule database beside it."""
        self._need_compiled("save")
        best = self.built.chosen if self.built.chosen is not None else self._best()
        tasks = self.extracted if self.model is not None else None
        self.saved = values.save(self.built, Path(directory) if directory else
                                 self.run_dir / "module", tasks, best,
                                 self.run_dir / "metaschedule")
        self._write_run()
        return self.saved.module_dir

    @classmethod
    def load(cls, run: str | Path, settings: Settings | None = None) -> "Session":
        """A saved run (by id under the home directory, or a run directory) ready to run."""
        settings = settings or Settings.from_env()
        run_dir = Path(run) if Path(run).is_dir() else settings.home / "runs" / str(run)
        info_path = run_dir / RUN_FILE
        if not info_path.exists():
            raise SessionError(f"no run {run!r} (looked for {info_path})")
        info = json.loads(info_path.read_text())
        module_dir = run_dir / "module"
        if not module_dir.exists():
            raise SessionError(f"run {info['run_id']} has no saved module; build and save it first")
        session = cls(None, info["spec"], settings)
        session.run_id, session.run_dir = info["run_id"], run_dir
        session.target, session.stages = info["target"], dict(info.get("stages", {}))
        session.results = dict(info.get("results", {}))
        compiled = CompiledModel.load(module_dir, threads=settings.measure.threads)
        session.built = BuiltModel(compiled)
        return session

    def export(self, out: str | Path, runtime: bool = False, python: str | None = None,
               overwrite: bool = False, synthetic_seed: int | None = None) -> dict:
        """Write the built model as a directory that runs with TVM's runtime and numpy alone
        (``deploy``); returns its manifest. Its test vector's outputs are this build's own,
        or for a device this machine lacks, an untuned build of the same model for this CPU.
        ``runtime`` bundles TVM's runtime (for ``python``, e.g. "3.12"); ``synthetic_seed``
        ships no weights: the loader makes them from the seed (to time a model on a host its
        weights cannot travel to; the test vector uses them too)."""
        return export_session(self, out, runtime, python, overwrite, synthetic_seed)

    def _note_provenance(self, compiled, best=None) -> None:
        """Note in ``compiled.functions`` where each config came from (``tasks.provenance``):
        this run's log, the shared records and the log the build read, the hardware-free
        picks."""
        logs = [self.run_dir / "log.jsonl", self.records_path]
        if isinstance(best, (str, Path)) and Path(best) not in logs:
            logs.append(Path(best))
        note_provenance(compiled.functions, logs, self.static)

    # -- use ----------------------------------------------------------------------------------------------
    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Numpy in, numpy out (a list: one array per model output)."""
        return self._need_compiled("run").run(*inputs)

    def evaluate(self, repeat: int = 20, min_repeat_ms: int = 0) -> dict:
        """Latency statistics (milliseconds) over repeated runs on random inputs."""
        compiled = self._need_compiled("evaluate")
        start = time.perf_counter()
        stats = compiled.time(repeat=repeat, min_repeat_ms=min_repeat_ms)
        self.stages["evaluate"] = time.perf_counter() - start
        self.results["latency_ms"] = {k: v * 1e3 for k, v in stats.to_json().items() if k != "costs"}
        self._write_run()
        return self.results["latency_ms"]

    def profile(self, repeat: int = 20, peak_gflops: float | None = None):
        """Where the built model's time goes, per fused function (``tasks.profile``)."""
        return profile_model(self._need_compiled("profile"), repeat=repeat,
                             peak_gflops=peak_gflops)

    @property
    def torch_source(self) -> tuple:
        """``(module, example inputs)`` the model was imported from; ``(None, None)`` for an
        ONNX import or a loaded run."""
        if self.imported is None:
            return None, None
        return self.imported.torch_module, self.imported.example_inputs

    def require_compiled(self, what: str):
        """The built module, or a ``SessionError`` saying ``what`` needs ``build()`` first."""
        return self._need_compiled(what)

    def torch_latency_ms(self, repeat: int = 20) -> float | None:
        """PyTorch eager latency of the imported module (None for ONNX imports)."""
        module, inputs = self.torch_source
        if module is None:
            return None
        import torch

        torch.set_num_threads(self.settings.measure.threads)
        with torch.no_grad():
            module(*inputs)
            samples = []
            for _ in range(repeat):
                start = time.perf_counter()
                module(*inputs)
                samples.append(time.perf_counter() - start)
        return float(np.median(samples) * 1e3)

    # -- bookkeeping ------------------------------------------------------------------------------------
    def summary(self) -> dict:
        tasks = []
        for t in self.tasks or []:
            res = self.schedule.tasks.get(task_label(t)) if self.schedule else None
            tasks.append({"name": task_label(t), "key": t.key, "weight": t.weight, "tunable": t.tunable,
                          "reason": t.reason, "trials": res.trials if res else 0,
                          "best_us": res.best_cost * 1e6 if res and np.isfinite(res.best_cost) else None})
        return {"run_id": self.run_id, "spec": self.spec, "target": self.target,
                "created": self.run_id[:15], "stages": self.stages, "tasks": tasks,
                "trials": self.schedule.trials if self.schedule else 0,
                "confirmed": self.schedule.confirmed if self.schedule else 0,
                "skipped": self.schedule.skipped if self.schedule else {},
                "results": self.results}

    def _write_run(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / RUN_FILE).write_text(json.dumps(self.summary(), indent=1))

    def source_model(self):
        """The imported model; for a loaded run, imported again from its spec (zoo or ONNX)."""
        return self.model if self.model is not None else model_from_spec(self.spec)

    def _check_timeable(self, remedy: str) -> None:
        """``workload.check_timeable`` for this session's target, as a ``SessionError``."""
        try:
            check_timeable(self.target, remedy)
        except UntimeableTarget as err:
            raise SessionError(str(err)) from None

    def _need_model(self, what: str) -> None:
        if self.model is None:
            raise SessionError(f"cannot {what}: a loaded run has no model; import it again")

    def _need_compiled(self, what: str):
        if self.built is None:
            raise SessionError(f"cannot {what}: build() the model first")
        return self.compiled

