"""The layering of docs/design.md holds: `lint-imports` keeps pyproject.toml's contract; and no
module uses a name it never defines or imports (pyflakes)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_packages_import_only_earlier_stages():
    # the console script beside this interpreter (the project's venv), without its cache dir
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


# TVMScript's buffer dtypes: ``T.Buffer((n,), "float32")`` under postponed annotations reads as
# a forward reference to a name ``float32``
DTYPES = {"float32", "float16", "int32", "int64", "bool"}


def test_no_module_uses_an_undefined_name():
    """A name used where it is not defined raises only when that line runs: ``relax`` used in
    one function but imported in another's scope dropped every Winograd convolution of a model
    whenever any one of them could not be rewritten."""
    from pyflakes import api, messages, reporter

    class Collect(reporter.Reporter):
        def __init__(self):
            super().__init__(None, None)
            self.found = []

        def flake(self, message):
            if isinstance(message, messages.UndefinedName) and \
                    message.message_args[0] not in DTYPES:
                self.found.append(str(message))

        def syntaxError(self, filename, msg, lineno, offset, text):
            self.found.append(f"{filename}:{lineno}: {msg}")

        def unexpectedError(self, filename, msg):
            self.found.append(f"{filename}: {msg}")

    collect = Collect()
    api.checkRecursive([str(ROOT / "tensortune")], collect)
    assert not collect.found, "\n".join(collect.found)
