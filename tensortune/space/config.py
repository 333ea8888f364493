"""``Config``: one point of a space, a frozen mapping from knob name to value."""
from __future__ import annotations

import json
from collections.abc import Mapping


class Config(Mapping):
    """Immutable, hashable, JSON round-trippable; replaying it rebuilds the same kernel."""

    __slots__ = ("_items", "_hash")

    def __init__(self, items: Mapping | None = None, **kw):
        d = dict(items or {}, **kw)
        self._items = tuple(sorted((k, _freeze(v)) for k, v in d.items()))
        self._hash = hash(self._items)

    def __getitem__(self, key):
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self):
        return (k for k, _ in self._items)

    def __len__(self):
        return len(self._items)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return isinstance(other, Config) and self._items == other._items

    def __repr__(self):
        return f"Config({dict(self._items)!r})"

    def to_json(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self._items}

    @staticmethod
    def from_json(d: Mapping) -> "Config":
        return Config(d)

    @property
    def digest(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v
