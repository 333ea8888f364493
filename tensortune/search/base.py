"""What a search strategy is: a ``Strategy`` (name, one-line summary, declared options and its
``propose``), listed in the registry ``search.STRATEGIES``.

A strategy module declares its options next to the code that reads them (Kernel Tuner's
``_options`` with ``common.get_options`` is the model), so adding a strategy is one new module
and one registry line. An option's value lives in ``SearchSettings``: in the field it names
(``setting``: the options of ``sa``, ``ga`` and ``es`` predate the registry and keep their
fields, ``sa_chains`` and so on), otherwise in ``SearchSettings.options[strategy][option]``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..settings import SearchSettings
from ..space import Config, ConfigSpace

# (space, model, task, n, exclude, rng, settings, seeds) -> up to n distinct configs
Proposer = Callable[..., list[Config]]


@dataclass(frozen=True)
class Option:
    """One option of a strategy: its default, a one-line help, and the ``SearchSettings`` field
    that holds it (empty: it is held in ``SearchSettings.options``)."""

    default: Any
    help: str
    setting: str = ""


def setting(name: str, help: str) -> Option:
    """An option held in the ``SearchSettings`` field ``name``; its default is that field's."""
    defaults = {f.name: f.default for f in dataclasses.fields(SearchSettings)}
    if name not in defaults:
        raise ValueError(f"SearchSettings has no field {name!r}")
    return Option(defaults[name], help, name)


@dataclass(frozen=True)
class Strategy:
    """A search strategy by name. Calling it proposes: ``strategy(space, model, task, n,
    exclude, rng, settings, seeds=())`` returns up to ``n`` distinct configs of ``space`` not in
    ``exclude``. A ``guided`` strategy walks on the cost model's scores (the model-guided
    tuners' ``--search``); one that is not is a tuner by itself (``random``, ``grid``)."""

    name: str
    summary: str  # one line, for help texts
    propose: Proposer
    options: Mapping[str, Option] = field(default_factory=dict)
    guided: bool = False

    def __call__(self, space: ConfigSpace, model, task, n: int, exclude: Collection[Config],
                 rng: np.random.Generator, settings: SearchSettings,
                 seeds: Sequence[Config] = ()) -> list[Config]:
        return self.propose(space, model, task, n, exclude, rng, settings, seeds)

    def check(self, values: Mapping[str, Any]) -> None:
        """Refuse, by name, options this strategy does not declare and values of the wrong kind."""
        unknown = [k for k in values if k not in self.options]
        if unknown:
            raise ValueError(f"unknown option(s) {', '.join(map(repr, unknown))} of search "
                             f"strategy {self.name!r}; its options: "
                             f"{', '.join(self.options) or 'none'}")
        for name, value in values.items():
            default = self.options[name].default
            # an int is a fine float; a bool is not a number here, though Python says it is
            kinds = (int, float) if isinstance(default, float) else (type(default),)
            if isinstance(value, bool) != isinstance(default, bool) or not isinstance(value, kinds):
                raise ValueError(f"option {name!r} of search strategy {self.name!r} takes a "
                                 f"{type(default).__name__}, not {value!r}")

    def configure(self, settings: SearchSettings, **values) -> SearchSettings:
        """``settings`` with these options of this strategy set; unknown ones are refused."""
        self.check(values)
        fields = {self.options[k].setting: v for k, v in values.items()
                  if self.options[k].setting}
        own = {k: v for k, v in values.items() if not self.options[k].setting}
        if own:
            fields["options"] = {**settings.options,
                                 self.name: {**settings.options.get(self.name, {}), **own}}
        return dataclasses.replace(settings, **fields)

    def values(self, settings: SearchSettings) -> dict[str, Any]:
        """Every option of this strategy with its value in ``settings``."""
        held = dataclasses.asdict(settings)
        given = settings.options.get(self.name, {})
        self.check(given)
        return {k: held[o.setting] if o.setting else given.get(k, o.default)
                for k, o in self.options.items()}


def check_options(registry: Mapping[str, Strategy], options: Mapping[str, Mapping]) -> None:
    """Refuse ``SearchSettings.options`` that name an unknown strategy or option, or set an
    option that has a ``SearchSettings`` field of its own."""
    for name, values in options.items():
        if name not in registry:
            raise ValueError(f"options for unknown search strategy {name!r}; known: "
                             f"{', '.join(registry)}")
        strategy = registry[name]
        strategy.check(values)
        fields = [f"{k} (set {strategy.options[k].setting})" for k in values
                  if strategy.options[k].setting]
        if fields:
            raise ValueError(f"options of {name!r} held in their own settings fields: "
                             f"{', '.join(fields)}")


__all__ = ["Option", "Strategy", "Proposer", "setting", "check_options"]
