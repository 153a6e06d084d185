# make lab: JupyterLab on work/, your copies of notebooks/.  make test: every test.
# make bench: ratios vs ideals.  make reset-work: fresh copies of the lessons in work/.
# Two installs into .venv, made the first time (and again when pyproject.toml or the pins change),
# with uv when it is installed (faster), else with pip, both pinned by constraints.txt:
#   make lab   the learner's: the runtime dependencies and TensorFlow, nothing else;
#   make test  the developer's: the same plus the [dev] extras (pytest, ruff, Playwright, Sphinx...).
# TensorFlow's build: TF=cuda when `nvidia-smi -L` lists a GPU, else TF=cpu (the CPU-only wheel);
# `make lab TF=cpu` or `make lab TF=cuda` chooses, and switches an existing .venv to that build.
# make lock: resolve the dependencies again (newest allowed by pyproject.toml) into constraints.txt.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
LAB_READY := $(VENV)/.installed-lab
READY := $(VENV)/.installed
CONSTRAINTS := constraints.txt
WORK := work
UV := $(shell command -v uv 2>/dev/null)
ifndef TF  # the build .venv holds; for a new one, the CUDA build when nvidia-smi lists a GPU
TF := $(or $(shell cat $(LAB_READY) 2>/dev/null),$(if $(shell nvidia-smi -L 2>/dev/null | grep '^GPU'),cuda,cpu))
endif
# JupyterLab refuses to run as root without --allow-root (containers, course servers).
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
ifneq ($(UV),)
INSTALL = $(UV) pip install --quiet --python $(PY) -c $(CONSTRAINTS)
UNINSTALL = $(UV) pip uninstall --quiet --python $(PY)
MAKE_VENV = test -x $(PY) || $(UV) venv --python $(PYTHON) $(VENV)
else
INSTALL = $(PY) -m pip install --quiet -c $(CONSTRAINTS)
UNINSTALL = $(PY) -m pip uninstall --quiet --yes
MAKE_VENV = test -x $(PY) || { $(PYTHON) -m venv $(VENV) && $(PY) -m pip install --quiet -c $(CONSTRAINTS) --upgrade pip; }
endif
# One TensorFlow build per .venv: both builds install the same `tensorflow` folder, so the other
# one (say the full `tensorflow` of a .venv made before the CPU-only build) is removed first.
ifeq ($(shell uname -sm),Linux x86_64)
OTHER_TF := $(if $(filter cuda,$(TF)),tensorflow-cpu,tensorflow)
endif

.PHONY: lab work reset-work test bench book lint lib clean screenshots mutate one-core classroom hosts lock FORCE

# The learner's install; the file records which TensorFlow build it holds. Another TF than the
# recorded one installs again (the other build is removed first).
ifneq ($(TF),$(or $(shell cat $(LAB_READY) 2>/dev/null),$(TF)))
$(LAB_READY): FORCE
endif
FORCE:

$(LAB_READY): pyproject.toml $(CONSTRAINTS)
	$(MAKE_VENV)
	$(if $(OTHER_TF),$(UNINSTALL) $(OTHER_TF) 2>/dev/null || true)
	$(INSTALL) -e '.[$(TF)]'
	echo $(TF) > $(LAB_READY)

# The developer's install: the learner's, with the same TensorFlow build, plus the [dev] extras.
$(READY): $(LAB_READY)
	$(INSTALL) -e ".[$$(cat $(LAB_READY)),dev]"
	touch $(READY)

lock:
	$(PYTHON) tools/lock.py $(CONSTRAINTS)

# Your working copies: made once from notebooks/, then kept (your edits and outputs stay there,
# git ignores them, and the tests check the committed lessons in notebooks/ only).
work:
	@mkdir -p $(WORK)
	@for lesson in notebooks/*.ipynb; do \
	  copy=$(WORK)/$${lesson#notebooks/}; \
	  if [ ! -e "$$copy" ]; then cp "$$lesson" "$$copy"; \
	  elif [ "$$lesson" -nt "$$copy" ]; then \
	    echo "note: $$lesson changed since $$copy was made; 'make reset-work' starts over from it"; fi; \
	done

reset-work:
	rm -rf $(WORK)
	$(MAKE) work

lab: $(LAB_READY) work
	@echo "JupyterLab on $(WORK)/, your copies of notebooks/: open the URL with ?token= that it prints below."
	$(VENV)/bin/jupyter lab $(ALLOW_ROOT) --ServerApp.root_dir=$(WORK)

# The notebooks' cells marked `#@save MODULE` are the source of d2lhelpers/MODULE.py: after editing
# one, `make lib` writes them into the package (tests/test_one_source.py fails until you do).
lib: $(READY)
	$(PY) tools/save_lib.py

lint: $(READY)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) tools/dead_code.py

# Two pytest-xdist workers, whole files each, the notebooks with the book's test as one
# (tests/conftest.py orders them: each notebook runs once); TEST_WORKERS=0 runs
# the suite in this process alone. Matplotlib's font cache lives in the .venv, not in ~/.cache:
# one left half-built by another install made every kernel warn "findfont" into checked outputs.
TEST_WORKERS ?= 2
test: lint
	MPLCONFIGDIR=$(abspath $(VENV))/matplotlib $(PY) -m pytest $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) --nbval-lax --durations=10 tests notebooks

bench: $(READY)
	$(PY) benchmarks/run_all.py

screenshots: $(READY)
	BROWSER_SCREENSHOTS=/tmp/d2l-screenshots BROWSER_RUNS_PER_PANEL=2 $(PY) -m pytest -q tests/test_browser.py
	@echo "screenshots in /tmp/d2l-screenshots; copy the ones the README shows into docs/screenshots/"

clean:
	rm -rf $(VENV) build *.egg-info  # keeps work/: 'make reset-work' clears it

# make book: run every notebook (default sliders) and render the pages into build/book/.
BOOK := build/book
book: $(READY)
	$(PY) docs/book/build.py --out $(BOOK)
	@echo "open $(BOOK)/index.html"

# Mutation testing of the measurement and model modules ([tool.mutmut] in pyproject.toml); not part
# of `make test`. Limit it with globs: make mutate MUTANTS='d2lhelpers.core.verdicts* d2lhelpers.collectives.costs*'
MUTANTS ?=
mutate: $(READY)
	rm -rf mutants  # mutmut keeps old verdicts when only the tests changed: start afresh
	$(VENV)/bin/mutmut run $(MUTANTS)
	$(VENV)/bin/mutmut results
	$(VENV)/bin/mutmut export-cicd-stats && cat mutants/mutmut-cicd-stats.json

# Every notebook on one CPU core, every printed statement checked against its numbers (minutes).
one-core: $(READY)
	$(PY) -m tests.one_core

# A class on one server: two copies each of notebooks 02 and 06 at once (a minute or two).
classroom: $(READY)
	$(PY) -m tests.classroom

# Notebook 06 across two network namespaces joined by a rate-limited link (root only; minutes):
# writes d2lhelpers/results/hosts/two-namespaces.json, shown in the notebook beside its own run.
hosts: $(READY)
	$(PY) benchmarks/hosts.py
