# `make demo` and `make test` work on a fresh machine: they create .venv with
# Python 3.12 when it is missing, install the project, then run.
PYTHON ?= $(shell command -v python3.12 || ls $$HOME/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -n1 || echo python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/hlo demo --report results/demo_report.md

test: $(STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) results .pytest_cache
