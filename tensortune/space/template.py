"""Templates: functions ``(knobs, schedule) -> schedule`` that both define and apply a space.

A template asks its ``KnobSource`` for values (``split``, ``choice``). While a space is being
defined, ``SpaceBuilder`` records each knob and answers with a default; while a config is being
applied, ``ConfigSource`` answers with the config's value. Knobs must not depend on other knobs'
values, so the space is a plain product. Both sources carry ``lanes``, the float32 lanes of the
target's vectors (8: AVX2, 16: AVX-512; None where no target is known): a template may shape
its loops for the register file (``analysis.fuse_positions``), so a space is one function's on
one kind of vector unit.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

from ..errors import strict
from .config import Config
from .knobs import ChoiceKnob, Knob, SplitKnob
from .space import ConfigSpace, InvalidConfigError


class SpaceBuilder:
    """Records the knobs a template defines; answers with a harmless default."""

    def __init__(self, lanes: int | None = None):
        self.knobs: list[Knob] = []
        self.lanes = lanes

    def split(self, name: str, extent: int, parts: int, max_inner: int = 0) -> tuple[int, ...]:
        knob = SplitKnob(name, int(extent), parts, max_inner)
        self.knobs.append(knob)
        return knob.candidates[-1]  # (extent, 1, ..., 1): always legal, tiny register tile

    def choice(self, name: str, options) -> object:
        knob = ChoiceKnob(name, tuple(options))
        self.knobs.append(knob)
        return knob.options[0]

    def space(self) -> ConfigSpace:
        return ConfigSpace(self.knobs)


class ConfigSource:
    """Answers a template's questions from one config."""

    def __init__(self, config: Config, lanes: int | None = None):
        self.config = config
        self.lanes = lanes

    def _get(self, name):
        try:
            return self.config[name]
        except KeyError:
            raise InvalidConfigError(f"config has no value for knob {name!r}") from None

    def split(self, name: str, extent: int, parts: int, max_inner: int = 0) -> tuple[int, ...]:
        return tuple(self._get(name))

    def choice(self, name: str, options) -> object:
        return self._get(name)


TemplateFn = Callable[[object, object], object]


@functools.cache
def _schedule_class():
    """``tvm.s_tir.Schedule`` without the type checks of every primitive's arguments: binding
    and checking them in Python was a third of the time a template took (3 ms a candidate, for
    each one scored or built). A wrong argument still fails, in TVM's own checks."""
    from tvm.s_tir import Schedule

    methods = {name: attr.__wrapped__ for name, attr in vars(Schedule).items()
               if callable(attr) and hasattr(attr, "__wrapped__")}
    return type("UncheckedSchedule", (Schedule,), methods)


def define_space(template: TemplateFn, prim_func, lanes: int | None = None) -> ConfigSpace:
    """Run ``template`` in define mode on a fresh schedule of ``prim_func`` (for a target
    with ``lanes``-wide float32 vectors)."""
    builder = SpaceBuilder(lanes)
    template(builder, _schedule_class()(prim_func))
    return builder.space()


def apply_template(template: TemplateFn, prim_func, space: ConfigSpace, config: Config,
                   lanes: int | None = None):
    """The scheduled ``tvm.s_tir.Schedule`` for ``config`` (the space defined with the same
    ``lanes``); ``InvalidConfigError`` if it can't be."""
    space.digits(config)  # refuses foreign configs by name
    sch = _schedule_class()(prim_func)
    try:
        result = template(ConfigSource(config, lanes), sch)
    except InvalidConfigError:
        raise
    except Exception as err:  # TVM raises ScheduleError/TVMError subclasses for illegal steps
        if strict():  # TENSORTUNE_STRICT: the template's own error, not an invalid config
            raise
        raise InvalidConfigError(f"schedule step failed: {str(err).splitlines()[0][:300]}") from err
    # a template may return a schedule of its own (e.g. a hand-written function) instead of mutating
    return sch if result is None else result
