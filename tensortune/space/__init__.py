"""How to schedule: knobs, configs, spaces and the templates that span them."""
from __future__ import annotations

import collections
import threading

from .config import Config
from .analysis import TemplateMismatch
from .cpu_template import generic_cpu
from .cuda_gemm import cuda_gemm
from .cuda_gemm_info import is_gemm
from .cuda_gemm_seeds import gemm_seeds
from .cuda_template import cuda_generic
from .knobs import ChoiceKnob, SplitKnob
from .seeds import cpu_seeds
from .space import ConfigSpace, InvalidConfigError
from .template import ConfigSource, SpaceBuilder, apply_template, define_space

TEMPLATES = {"cpu.generic": generic_cpu, "cuda.generic": cuda_generic, "cuda.gemm": cuda_gemm}
# templates that know good starting points: ``(space, prim_func, lanes, threads) -> configs``
SEEDS = {"cpu.generic": cpu_seeds, "cuda.gemm": gemm_seeds}


def template_for(target: dict, prim_func=None) -> str:
    """The built-in template for a target: ``cpu.generic`` for CPUs; for CUDA ``cuda.gemm``
    when ``prim_func`` (the function to tune, if given) is a matrix product, else
    ``cuda.generic``."""
    if target.get("kind") != "cuda":
        return "cpu.generic"
    return "cuda.gemm" if prim_func is not None and is_gemm(prim_func) else "cuda.generic"


def _template(name: str):
    """A built-in template by name, or any importable one as ``"package.module:function"``."""
    if ":" in name:
        import importlib

        module, _, attr = name.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as err:
            raise InvalidConfigError(f"cannot load template {name!r}: {err}") from err
    if name not in TEMPLATES:
        raise InvalidConfigError(f"unknown template {name!r}; known: {', '.join(TEMPLATES)}")
    return TEMPLATES[name]


SPACES_KEPT = 512  # a big model's tasks, under both a CPU's and a GPU's templates
_SPACES: collections.OrderedDict = collections.OrderedDict()
_SPACES_LOCK = threading.Lock()


def task_space(task) -> ConfigSpace:
    """The ``ConfigSpace`` of ``task`` under its template. Spaces are immutable and defining
    one runs the template (0.1-0.4 s for a CUDA function), so the last ``SPACES_KEPT`` are
    kept: a model build checks each task's best record against the space its tuning used."""
    template = _template(task.template)
    lanes = _lanes(task)
    # the key names the function's structure, not its buffers, whose names the knobs carry
    key = (template, task.template, task.workload.key, task.workload.param_names, lanes)
    with _SPACES_LOCK:  # the hardware-free search scores in a second thread
        space = _SPACES.get(key)
        if space is not None:
            _SPACES.move_to_end(key)
            return space
    space = define_space(template, task.workload.prim_func(), lanes)
    with _SPACES_LOCK:
        _SPACES[key] = space
        while len(_SPACES) > SPACES_KEPT:
            _SPACES.popitem(last=False)
    return space


def task_seeds(task, space: ConfigSpace | None = None, limit: int = 12) -> list[Config]:
    """Configs the task's template would try first (``seeds``); empty for a template without."""
    seeds = SEEDS.get(task.template)
    if seeds is None:
        return []
    from ..workload import vector_lanes

    threads = int(task.target.get("num-cores", 1)) if isinstance(task.target, dict) else 1
    return seeds(space or task_space(task), task.workload.prim_func(),
                 lanes=vector_lanes(task.target), threads=threads, limit=limit)


def apply_config(task, config: Config, space: ConfigSpace | None = None):
    """The scheduled ``tvm.s_tir.Schedule`` of ``task`` for ``config``."""
    space = space or task_space(task)
    return apply_template(_template(task.template), task.workload.prim_func(), space, config,
                          _lanes(task))


def _lanes(task) -> int | None:
    """The float32 vector lanes a CPU task's template shapes its loops for; None for a GPU."""
    from ..workload import vector_lanes

    target = task.target if isinstance(task.target, dict) else {}
    return vector_lanes(target) if target.get("kind", "llvm") == "llvm" else None


__all__ = ["Config", "ConfigSpace", "SplitKnob", "ChoiceKnob", "InvalidConfigError",
           "TemplateMismatch", "SpaceBuilder", "ConfigSource", "TEMPLATES", "task_space",
           "apply_config", "generic_cpu", "task_seeds", "SEEDS", "template_for", "is_gemm"]
