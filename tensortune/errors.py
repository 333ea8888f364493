"""Failures kept whole: the strict switch, and the full text of an error.

Tuning turns failures into values: a candidate that does not build is a record, a graph rewrite
that fails leaves the model as it was. That keeps a run going, and hides the cause; a record
keeps one line of it. ``full_text`` is the rest (a run's ``errors.log`` holds it, see
``records.errors_path``), and ``TENSORTUNE_STRICT=1`` makes the places that swallow a failure
(builder, runner, template application, graph rewrites) raise it instead: for debugging a
template or a rewrite, not for tuning, which meets invalid configs all the time.
"""
from __future__ import annotations

import os
import traceback

STRICT_ENV = "TENSORTUNE_STRICT"
DETAIL_MAX = 200_000  # characters of one error's text; TVM's can quote a whole function

_forced: bool | None = None  # a worker told the switch by its parent (``set_strict``)


class StrictError(RuntimeError):
    """A failure in a worker process, raised in strict mode in the process that asked for the
    work; its message ends with the worker's traceback."""


def strict() -> bool:
    """Whether failures are to be raised rather than recorded (``TENSORTUNE_STRICT`` is set to
    anything but ``0``, ``false``, ``no``, ``off`` or nothing)."""
    if _forced is not None:
        return _forced
    return os.environ.get(STRICT_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def set_strict(value: bool | None) -> None:
    """Decide ``strict()`` in this process regardless of its environment (None: follow it).
    For workers: one started from a forkserver has the server's environment, not its
    parent's."""
    global _forced
    _forced = value


def full_text(err: BaseException) -> str:
    """``err``'s traceback with its causes, as Python prints them (at most ``DETAIL_MAX``
    characters, the end kept: the innermost frames and the message)."""
    text = "".join(traceback.format_exception(err)).rstrip()
    return text if len(text) <= DETAIL_MAX else "...\n" + text[-DETAIL_MAX:]


def raise_if_strict(what: str, detail: str) -> None:
    """In strict mode, raise ``StrictError`` for a failure that came back from a worker as a
    value (``what``: its kind and one line, ``detail``: the worker's full text)."""
    if strict():
        raise StrictError(f"{what} ({STRICT_ENV} is set)\n{detail}".rstrip())
