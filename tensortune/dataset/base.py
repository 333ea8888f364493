"""Datasets of measurements for training and judging cost models.

A dataset is an ordinary records log (so collection resumes like tuning does) plus a small
manifest beside it, ``<name>.tasks.json``, naming each task: a short name, its operator kind and
where it comes from (``benchmark`` or a zoo model). ``load_dataset`` groups the records by task,
pooling the sessions of a config timed more than once; ``collect`` and ``remeasure`` measure
them, ``noise`` says how far one session agrees with the others.

    ds = load_dataset("data/cpu.jsonl.gz")
    for t in ds: print(t.info.name, t.n_ok, t.best_gflops)
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..measure.types import ErrorKind, MeasureInput, MeasureResult
from ..records import Record, load_records
from ..space import Config
from ..workload import Conv2d, Dense, Matmul, PrimFuncWorkload, Task, Workload

MANIFEST_FORMAT = "tensortune.dataset"
# operator kinds a dataset collects from models: the reductions the cost models are about
MODEL_OPS = ("conv2d", "depthwise_conv2d", "dense", "batch_matmul", "matmul")


def benchmark_workloads() -> dict[str, Workload]:
    """The four benchmark operators by name: ResNet-18's C7 and C12 (as in "Learning 'Learning
    to Optimize Tensor Programs'"), a 512^3 matmul and BERT's 128x768 -> 3072 dense."""
    return {
        "conv2d_C7": Conv2d(n=1, c=128, h=28, w=28, filters=256, kh=3, kw=3, stride=2, padding=1),
        "conv2d_C12": Conv2d(n=1, c=512, h=7, w=7, filters=512, kh=3, kw=3, stride=1, padding=1),
        "matmul_512": Matmul(m=512, n=512, k=512),
        "dense_128x768x3072": Dense(batch=128, in_features=768, out_features=3072),
    }


def op_kind(workload: Workload) -> str:
    """The operator kind: conv2d, depthwise_conv2d, dense, matmul, batch_matmul, or (for fused
    model functions that are none of these, e.g. pooling) ``other``."""
    if isinstance(workload, PrimFuncWorkload):
        name = workload.name
        try:
            shapes = workload.input_shapes
        except Exception:  # a function this TVM cannot parse still gets a kind by its name
            shapes = []
        if "conv2d" in name:
            # weights of one input channel per group, with several groups: depthwise
            depthwise = (len(shapes) >= 2 and len(shapes[1]) == 4
                         and shapes[1][1] == 1 < shapes[0][1])
            return "depthwise_conv2d" if depthwise else "conv2d"
        if "matmul" in name or "dense" in name:
            return "batch_matmul" if shapes and len(shapes[0]) == 3 else "dense"
        return "other"
    if isinstance(workload, Conv2d) and workload.groups > 1 and workload.groups == workload.c:
        return "depthwise_conv2d"
    return workload.op


def shape_key(workload: Workload) -> tuple:
    """Equal for tasks that compute one operator on the same operand shapes, whatever is fused
    around it (ResNet-18's conv + add + relu and the bare benchmark conv C7 share a key).
    Held-out evaluations keep such twins out of training, so transfer is to unseen shapes."""
    try:
        shapes = workload.input_shapes[:2]
    except Exception:  # a function TVM cannot parse: only its kind
        shapes = []
    # sorted dims: a transposed weight (dense vs. matmul layouts) is the same operand
    return (op_kind(workload), tuple(tuple(sorted(int(d) for d in s)) for s in shapes))


def default_name(workload: Workload) -> str:
    """A readable name for a workload without a manifest entry, e.g. ``matmul_32x32x32``."""
    for name, known in benchmark_workloads().items():
        if known == workload:
            return name
    if isinstance(workload, PrimFuncWorkload):
        return workload.name
    values = [str(int(v)) for k, v in workload.params().items() if k != "dtype"]
    return f"{workload.op}_{'x'.join(values)}"


@dataclass(frozen=True)
class TaskInfo:
    """What a dataset knows about one task besides its records."""

    key: str  # Task.key
    name: str
    op: str
    source: str  # "benchmark", a zoo model name, or "records" (no manifest entry)
    weight: int = 1  # calls per inference in the source model

    def to_json(self) -> dict:
        return {"key": self.key, "name": self.name, "op": self.op, "source": self.source,
                "weight": self.weight}

    @staticmethod
    def from_json(d: dict) -> "TaskInfo":
        return TaskInfo(str(d["key"]), str(d["name"]), str(d["op"]), str(d["source"]),
                        int(d.get("weight", 1)))


@dataclass(frozen=True)
class TaskData:
    """One task's measurements: distinct configs in file order, each config's records pooled
    by ``pool_results`` (``dataset remeasure`` times a config again in a later session)."""

    info: TaskInfo
    task: Task
    inputs: tuple[MeasureInput, ...]
    results: tuple[MeasureResult, ...]

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def n(self) -> int:
        return len(self.inputs)

    @property
    def n_ok(self) -> int:
        return sum(r.ok for r in self.results)

    @property
    def best_cost(self) -> float:
        """The lowest cost in seconds (inf without a successful record)."""
        return min((r.cost for r in self.results if r.ok), default=float("inf"))

    @property
    def flops(self) -> int:
        try:
            return int(self.task.workload.flops)
        except Exception:  # TVM's estimator refuses some functions: no GFLOP/s then
            return 0

    @property
    def best_gflops(self) -> float:
        best = self.best_cost
        return self.flops / best / 1e9 if best < float("inf") and self.flops else 0.0

    def subset(self, indices: Sequence[int]) -> "TaskData":
        return TaskData(self.info, self.task, tuple(self.inputs[i] for i in indices),
                        tuple(self.results[i] for i in indices))


@dataclass(frozen=True)
class Dataset:
    """Records grouped by task, in order of first appearance in the file."""

    tasks: tuple[TaskData, ...]
    path: Path | None = None

    def __iter__(self) -> Iterator[TaskData]:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tasks]

    @property
    def n_records(self) -> int:
        return sum(t.n for t in self.tasks)

    def get(self, name: str) -> TaskData:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(f"no task {name!r} in the dataset; tasks: {', '.join(self.names)}")

    def select(self, names: Sequence[str]) -> "Dataset":
        """The tasks named (a name may also be a source: all tasks of that model)."""
        return Dataset(tuple(self.tasks[i] for i in self.match(names)), self.path)

    def match(self, names: Sequence[str]) -> list[int]:
        """Indices of the tasks matching ``names`` (task names or sources), in dataset order;
        a name matching nothing raises ``KeyError`` listing what exists."""
        picked: set[int] = set()
        for name in names:
            hits = {i for i, t in enumerate(self.tasks) if name in (t.name, t.info.source)}
            if not hits:
                sources = sorted({t.info.source for t in self.tasks})
                raise KeyError(f"{name!r} is neither a task nor a source of the dataset; tasks: "
                               f"{', '.join(self.names)}; sources: {', '.join(sources)}")
            picked |= hits
        return sorted(picked)

    def join(self, other: "Dataset") -> "Dataset":
        """This dataset's tasks then ``other``'s (e.g. another file measured on the same kind
        of machine); a name taken already gets ``#`` and the task key's head, as two targets
        of one workload do in one file. A task in both is an error: its records would count
        twice."""
        keys = {t.info.key for t in self.tasks}
        both = [t.name for t in other.tasks if t.info.key in keys]
        if both:
            raise ValueError(f"{other.path} repeats tasks of {self.path}: {', '.join(both)}")
        used, added = set(self.names), []
        for t in other.tasks:
            t = replace(t, info=_unique(t.info, used))
            added.append(t)
        return Dataset(self.tasks + tuple(added), self.path)


# -- manifest --------------------------------------------------------------------------------------

def _base(path: str | os.PathLike) -> str:
    """``data/dataset.jsonl.gz`` and ``data/dataset.jsonl`` -> ``data/dataset``."""
    name = Path(path).name
    for suffix in (".gz", ".jsonl"):
        name = name.removesuffix(suffix)
    return str(Path(path).with_name(name))


def manifest_path(path: str | os.PathLike) -> Path:
    """``data/dataset.jsonl[.gz]`` -> ``data/dataset.tasks.json``."""
    return Path(_base(path) + ".tasks.json")


def features_path(path: str | os.PathLike) -> Path:
    """Where a dataset keeps its stored feature rows: ``data/dataset.features/``."""
    return Path(_base(path) + ".features")


def working_log(path: str | os.PathLike) -> Path:
    """The uncompressed log a packed dataset (``.jsonl.gz``) is collected into."""
    path = Path(path)
    return path.with_suffix("") if path.suffix == ".gz" else path


def read_manifest(path: str | os.PathLike) -> dict[str, TaskInfo]:
    """Task key -> ``TaskInfo`` from the manifest beside the records file ({} when absent)."""
    mpath = manifest_path(path)
    if not mpath.exists():
        return {}
    doc = json.loads(mpath.read_text())
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{mpath}: not a tensortune dataset manifest")
    return {t["key"]: TaskInfo.from_json(t) for t in doc["tasks"]}


def write_manifest(path: str | os.PathLike, infos: Sequence[TaskInfo]) -> None:
    """Merge ``infos`` into the manifest (an existing entry of the same key is replaced)."""
    merged = read_manifest(path)
    merged.update({i.key: i for i in infos})
    mpath = manifest_path(path)
    mpath.parent.mkdir(parents=True, exist_ok=True)
    tmp = mpath.with_name(mpath.name + ".tmp")
    doc = {"format": MANIFEST_FORMAT, "version": 1, "tasks": [i.to_json() for i in merged.values()]}
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, mpath)


# -- loading ---------------------------------------------------------------------------------------

def pool_results(results: Sequence[MeasureResult]) -> MeasureResult:
    """One result for a config timed in several sessions: the successful sessions' repeats
    together, so its cost is the median over all of them and one disturbed session moves it
    less. A wrong result in any session is kept (correctness is not noise); a config that
    never ran keeps its first error."""
    if len(results) == 1:
        return results[0]
    wrong = [r for r in results if r.error is ErrorKind.WRONG_RESULT]
    good = [r for r in results if r.ok]
    if wrong or not good:
        return (wrong or list(results))[0]
    return MeasureResult(tuple(c for r in good for c in r.costs), ErrorKind.NONE,
                         "; ".join(dict.fromkeys(r.message for r in good if r.message)),
                         good[0].build_s, sum(r.run_s for r in good),
                         any(r.verified for r in good), good[-1].timestamp)


def record_sessions(path: str | os.PathLike,
                    on_corrupt: Callable[[int, str], None] | None = None
                    ) -> dict[tuple[str, Config], list[Record]]:
    """The records of ``path`` by (task key, config), in order of first appearance: one
    record per timing session of that config."""
    sessions: dict[tuple[str, Config], list[Record]] = {}
    for rec in load_records(path, on_corrupt=on_corrupt):
        sessions.setdefault((rec.task_key, rec.config), []).append(rec)
    return sessions


def _unique(info: TaskInfo, used: set[str]) -> TaskInfo:
    """``info``, renamed ``name#<key head>`` if its name is in ``used``; adds the name used."""
    if info.name in used:
        info = replace(info, name=f"{info.name}#{info.key[:6]}")
    used.add(info.name)
    return info


def load_dataset(path: str | os.PathLike,
                 on_corrupt: Callable[[int, str], None] | None = None) -> Dataset:
    """The records of ``path`` grouped by task, named by the manifest when there is one."""
    manifest = read_manifest(path)
    groups: dict[str, dict] = {}
    for (key, config), recs in record_sessions(path, on_corrupt).items():
        group = groups.setdefault(key, {"task": recs[0].to_task(), "configs": {}})
        group["configs"][config] = [r.to_result() for r in recs]
    tasks, used = [], set()
    for key, group in groups.items():
        task = group["task"]
        info = manifest.get(key) or TaskInfo(key, default_name(task.workload),
                                              op_kind(task.workload), "records")
        info = _unique(info, used)  # two targets (or TVM versions) of one workload
        configs = group["configs"]
        tasks.append(TaskData(info, task, tuple(MeasureInput(task, c) for c in configs),
                              tuple(pool_results(rs) for rs in configs.values())))
    return Dataset(tuple(tasks), Path(path))


__all__ = ["Dataset", "TaskData", "TaskInfo", "benchmark_workloads", "op_kind", "default_name",
           "shape_key", "pool_results", "record_sessions", "load_dataset", "manifest_path",
           "features_path", "working_log", "read_manifest", "write_manifest", "MODEL_OPS"]
