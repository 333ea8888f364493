"""The suite's own distribution: under the Makefile's ``pytest -n 2 --dist loadgroup`` each
module runs whole on one worker (``conftest.pytest_collection_modifyitems``). The hook's order
and pytest 9.2 each broke this silently before: modules split, each worker starting the
module's servers, and the cluster test's two tests each a Ray cluster, one's teardown killing
the other's."""
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_each_module_runs_whole_on_one_worker():
    modules = ["test_errors.py", "test_metrics.py"]
    out = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
                          "-p", "no:cacheprovider", *(str(HERE / m) for m in modules)],
                         capture_output=True, text=True, timeout=600, cwd=HERE.parent).stdout
    workers: dict[str, set[str]] = {}
    for worker, module, group in re.findall(r"\[(gw\d+)\].*?PASSED (tests/\S+?\.py)::\S+?@(\S+)",
                                            out):
        workers.setdefault(module, set()).add(worker)
        assert group.endswith(module.split("/")[-1]), (module, group)
    assert set(workers) == {f"tests/{m}" for m in modules}, out[-3000:]
    assert all(len(w) == 1 for w in workers.values()), workers
