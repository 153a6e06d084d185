# make lab: JupyterLab on notebooks/.  make test: every test.  make bench: ratios vs ideals.
# Each target creates .venv from pyproject.toml the first time (and again when it changes).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
READY := $(VENV)/.installed

.PHONY: lab test bench lint clean screenshots mutate one-core

$(READY): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(READY)

lab: $(READY)
	$(VENV)/bin/jupyter lab notebooks/

lint: $(READY)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports

test: lint
	$(PY) -m pytest --nbval-lax --durations=10 tests notebooks

# Mutation testing of the measurement and model modules ([tool.mutmut] in pyproject.toml); not part
# of `make test`. Limit it with globs: make mutate MUTANTS='d2lhelpers.verdicts* d2lhelpers.costs*'
MUTANTS ?=
mutate: $(READY)
	rm -rf mutants  # mutmut keeps old verdicts when only the tests changed: start afresh
	$(VENV)/bin/mutmut run $(MUTANTS)
	$(VENV)/bin/mutmut results
	$(VENV)/bin/mutmut export-cicd-stats && cat mutants/mutmut-cicd-stats.json

# Every notebook on one CPU core, every printed statement checked against its numbers (minutes).
one-core: $(READY)
	$(PY) -m tests.one_core

bench: $(READY)
	$(PY) benchmarks/run_all.py

screenshots: $(READY)
	BROWSER_SCREENSHOTS=/tmp/d2l-screenshots $(PY) -m pytest -q tests/test_browser.py
	@echo "screenshots in /tmp/d2l-screenshots; copy the ones the README shows into docs/screenshots/"

clean:
	rm -rf $(VENV) build *.egg-info
