"""Fixtures shared by test modules."""
import importlib.util
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def emulator():
    """``benchmarks/cuda_emulator.py``: CUDA kernels run on the CPU, to check them without a GPU."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "cuda_emulator.py"
    spec = importlib.util.spec_from_file_location("cuda_emulator", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
