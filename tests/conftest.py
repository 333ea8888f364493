"""Fixtures shared by test modules."""
import importlib.util
from pathlib import Path

import pytest

# Modules that must not run beside each other under ``pytest -n`` (the Makefile's two workers):
# both start Ray, and a loopback cluster's teardown (``ray stop --force``) ends every Ray
# process on the machine, the other module's included.
SHARED_GROUPS = {"test_ray_backend": "ray", "test_cluster": "ray"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` a worker takes a whole module (its module-scoped servers
    and clusters start once), and the modules of one shared group go to one worker. First:
    xdist's own hook copies the groups into the test ids, and this conftest, loaded before
    xdist's worker plugin, would otherwise run after it (every group silently ignored)."""
    for item in items:
        module = item.path.stem
        item.add_marker(pytest.mark.xdist_group(SHARED_GROUPS.get(module, str(item.path))))


@pytest.fixture(scope="session")
def emulator():
    """``benchmarks/cuda_emulator.py``: CUDA kernels run on the CPU, to check them without a GPU."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "cuda_emulator.py"
    spec = importlib.util.spec_from_file_location("cuda_emulator", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
