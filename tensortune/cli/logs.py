"""What the command prints besides its results: ``--verbose`` logging, and TVM's own noise.

``--verbose`` sets the ``tensortune`` logger to DEBUG (each trial, worker restarts, ...) on the
console's stderr. Without it, TVM's C++ warnings are kept out of commands that load a built
model: TVM 0.27's VM logs ``executable.cc:340: Warning: Scope Loaded: ...`` for each entry of
an executable's memory-scope section as it loads it (``VMExecutable::LoadMemoryScopeSection``;
dozens of lines before ``profile``'s table on a small transformer), with ``LOG(WARNING)``
straight to file descriptor 2 and no switch to silence it (``TVM_LOG_DEBUG`` only adds VLOG
lines). ``quiet_tvm`` therefore filters fd 2 itself, through ``wurlitzer``.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re

from rich.logging import RichHandler

from .common import console

# TVM's LOG(WARNING) format: "[hh:mm:ss] /path/file.cc:340: Warning: text"
TVM_WARNING = re.compile(r"^\[\d\d:\d\d:\d\d\] \S+\.(?:cc|h):\d+: Warning: ")

_verbose = False


def configure(verbose: bool) -> None:
    """Set up logging for one command: DEBUG from tensortune (and TVM's warnings left alone)
    with ``verbose``; otherwise Python's default (warnings and errors, on stderr)."""
    global _verbose
    _verbose = verbose
    logger = logging.getLogger("tensortune")
    ours = [h for h in logger.handlers if getattr(h, "_tensortune_cli", False)]
    if not verbose:
        for h in ours:
            logger.removeHandler(h)
        logger.setLevel(logging.NOTSET)
        return
    if not ours:  # once per process: tests invoke the app many times
        handler = RichHandler(console=console, show_path=False, markup=False)
        handler._tensortune_cli = True
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)


class _DropLines:
    """A text sink for wurlitzer: whole lines that match ``pattern`` are dropped, the rest
    written to ``out``."""

    def __init__(self, out, pattern: re.Pattern):
        self.out, self.pattern, self.pending, self.dropped = out, pattern, "", 0

    def write(self, text: str) -> None:
        *lines, self.pending = (self.pending + text).split("\n")
        self._emit(lines)

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:
        """Write what is left of an unfinished last line."""
        if self.pending:
            self._emit([self.pending], newline=False)
            self.pending = ""
        self.out.flush()

    def _emit(self, lines: list[str], newline: bool = True) -> None:
        for line in lines:
            if self.pattern.search(line):
                self.dropped += 1
            else:
                self.out.write(line + ("\n" if newline else ""))
        self.out.flush()


@contextlib.contextmanager
def quiet_tvm(pattern: re.Pattern = TVM_WARNING):
    """Drop TVM's C++ warning lines from this process's stderr (fd 2) while the block runs;
    everything else, Python's own output included, passes. A no-op with ``--verbose``."""
    if _verbose:
        yield
        return
    from wurlitzer import pipes

    # fd 2 is redirected into wurlitzer's pipe while the block runs: what passes is written to
    # a copy of the original descriptor, never back into the pipe
    out = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
    sink = _DropLines(out, pattern)
    try:
        with pipes(stdout=None, stderr=sink):
            yield
    finally:
        sink.close()
        out.close()
