# `make demo` and `make test` work on a fresh machine: they create .venv with
# Python 3.12 when it is missing, install the project, then run.
PYTHON ?= $(shell command -v python3.12 || ls $$HOME/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -n1 || echo python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Debian packages the tests and the demo use: graphviz renders graphs, chromium
# drives the before/after page in a browser test.  Installed when missing.
APT_PKGS := graphviz chromium chromium-driver

.PHONY: demo test venv clean sysdeps

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# setup.py builds the parser's compiled core from hlo_tools/_scan.pyx (skipped without a C compiler)
$(STAMP): $(BIN)/python pyproject.toml setup.py $(wildcard hlo_tools/_scan*.pyx hlo_tools/_scan*.pxi)
	@# setuptools prints a page about editable installs as a warning: not for the user.
	@# XLA:GPU without a GPU (deviceless compiles for H100 etc.) needs jax's CUDA plugin
	@# at jaxlib's exact version: jax[cuda12-local] (in our jax range) lets pip pick the newest jax with
	@# one (no nvidia-* runtime wheels), plus ptxas from nvcc.  Without it, plain jax.
	PYTHONWARNINGS=ignore $(BIN)/pip install --quiet -e '.[dev]' 'jax[cuda12-local]>=0.10,<0.13' 'nvidia-cuda-nvcc-cu12>=12.4,<13' || \
	  { echo "warning: no CUDA plugin for jax; deviceless GPU tests will skip"; \
	    PYTHONWARNINGS=ignore $(BIN)/pip install --quiet -e '.[dev]'; }
	touch $(STAMP)

venv: $(STAMP)

sysdeps:
	@if command -v dot >/dev/null && test -x /usr/bin/chromedriver; then :; \
	elif [ "$$(id -u)" = 0 ] || command -v sudo >/dev/null; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(APT_PKGS) >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -q >/dev/null 2>&1 && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(APT_PKGS) >/dev/null; } || \
	  echo "warning: could not install $(APT_PKGS); graph and browser tests will skip"; \
	else echo "warning: not root: install $(APT_PKGS) for the graph and browser tests"; fi

demo: sysdeps $(STAMP)
	$(BIN)/hlo demo --report results/demo_report.md

# One worker per core, at most 4 (each imports jax and compiles full-size modules);
# tests that share a machine-wide resource (a local Ray cluster) share a worker.
test: sysdeps $(STAMP)
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist loadgroup

clean:
	rm -rf $(VENV) results .pytest_cache
