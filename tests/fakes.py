"""Injected stand-ins for the builder and the runner: search logic without hardware noise."""
from __future__ import annotations

from tensortune.measure import BuildResult, ErrorKind, MeasureResult


class FakeBuilder:
    """Builds nothing; every config 'compiles' (the timer decides its cost)."""

    def __init__(self):
        self.built = []

    def build(self, inputs, limit=None):
        self.built.extend(i.config for i in inputs)
        return [BuildResult(path="fake.so", build_s=0.0) for _ in inputs]


class ReplayRunner:
    """A replayed timer: cost is a deterministic function of (task, config); None = a crash."""

    def __init__(self, cost_fn):
        self.cost_fn = cost_fn
        self.calls = 0

    def run(self, inputs, builds, verify=None):
        self.calls += 1
        out = []
        for inp, build in zip(inputs, builds):
            try:
                cost = self.cost_fn(inp.config, inp.task)
            except TypeError:
                cost = self.cost_fn(inp.config)
            if cost is None:
                out.append(MeasureResult((), ErrorKind.RUNTIME_ERROR, "boom", build.build_s))
            else:
                out.append(MeasureResult((cost, cost), verified=bool(verify and verify[0]),
                                         build_s=build.build_s))
        return out


def drive_groups(gen, builder, runner):
    """``tuner.stages.drive`` that also returns the stage groups in order, each a list of
    ``Stage``: ``(groups, the generator's return value)``."""
    tools, groups = {"build": builder, "measure": runner}, []
    try:
        item = next(gen)
        while True:
            group = item if isinstance(item, tuple) else (item,)
            groups.append(list(group))
            values = tuple(s.run(tools.get(s.kind)) for s in group)
            item = gen.send(values if isinstance(item, tuple) else values[0])
    except StopIteration as stop:
        return groups, stop.value
