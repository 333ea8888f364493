"""A worker initializer that fails a set number of times: ``WorkerPool`` must retry a start."""
from __future__ import annotations

import sys
from pathlib import Path


def flaky_start(countdown: str) -> None:
    """Exit with code 3 while the number in file ``countdown`` is positive, counting it down."""
    path = Path(countdown)
    left = int(path.read_text())
    if left > 0:
        path.write_text(str(left - 1))
        sys.exit(3)
