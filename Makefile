# The two commands that matter: `make run` (tune one operator) and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# Keyed on the content of pyproject.toml: editing the dependencies reinstalls, nothing else does.
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: venv test run bench

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e ".[bench,test]"
	rm -f $(VENV)/.installed-*
	touch $@

test: venv
	$(BIN)/python -m pytest -q tests

run: venv
	$(BIN)/tensortune tune-model resnet18 --trials 800

bench: venv
	$(BIN)/python benchmarks/bench_ops.py
