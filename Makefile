# The two commands that matter: `make run` (tune one operator) and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# Keyed on the content of pyproject.toml: editing the dependencies reinstalls, nothing else does.
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: venv browser test run bench

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e ".[bench,test]"
	rm -f $(VENV)/.installed-*
	touch $@

# the dashboard test drives Debian's chromium through chromedriver; installed when missing
# (as root, or with password-less sudo)
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo "sudo -n" ); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
	    chromium chromium-driver >/dev/null; }

# Two workers, a test module at a time each (most tests build with TVM on one core or wait on a
# server); modules that share machine-wide state run on one worker (tests/conftest.py).
TEST_WORKERS ?= 2

test: venv browser
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup tests

run: venv
	$(BIN)/tensortune tune-model resnet18 --trials 800

bench: venv
	$(BIN)/python benchmarks/bench_ops.py
