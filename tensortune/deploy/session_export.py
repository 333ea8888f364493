"""``Session.export``'s work: the test vector's outputs, then ``export_model``."""
from __future__ import annotations

import numpy as np

from ..frontend.model import random_inputs
from ..workload import default_target, untimeable_reason
from .export import ExportError, export_model, synthetic_recipe


def export_session(session, out, runtime: bool = False, python: str | None = None,
                   overwrite: bool = False, synthetic_seed: int | None = None) -> dict:
    """Export ``session``'s built model (see ``Session.export``); returns the manifest."""
    compiled = session.require_compiled("export")
    inputs = random_inputs(compiled.inputs, seed=0)
    recipe, values = None, None
    if synthetic_seed is not None:
        recipe, values = synthetic_recipe(compiled.weights, synthetic_seed)
    outputs = reference_outputs(session, compiled, inputs, values)
    functions = [{"name": name, **info,
                  # a run saved before schedules were named says only whether it was tuned
                  "schedule": info.get("schedule", "tuned" if info.get("tuned") else "default")}
                 for name, info in compiled.functions.items()]
    return export_model(compiled, out, inputs, outputs, functions, run_id=session.run_id,
                        runtime=runtime, python=python, overwrite=overwrite, synthetic=recipe)


def reference_outputs(session, compiled, inputs, weights=None) -> list[np.ndarray]:
    """The outputs for ``inputs`` (with ``weights`` instead of the model's, if given): the
    build itself where this host runs it, else an untuned build of the model for this CPU."""
    if compiled.target.get("kind") == "llvm" and not untimeable_reason(compiled.target):
        return (compiled if weights is None else compiled.with_weights(weights)).run(*inputs)
    from ..tasks import build_model

    threads = session.settings.measure.threads
    model = session.source_model()  # a method, not an import: deploy sits below session
    host = build_model(model, default_target(threads), None, threads=threads,
                       graph=session.graph)
    if weights is not None:
        # the untuned build lifts the same constants in the same order; say so if not
        same = len(host.weights) == len(compiled.weights) and all(
            np.array_equal(a.value, b.value) for a, b in zip(host.weights, compiled.weights))
        if not same:
            raise ExportError("synthetic weights need this CPU's build of the model to take "
                              "the same weights as the exported one, and it does not")
        host = host.with_weights(weights)
    return host.run(*inputs)
