# Transformers from Scratch — three commands do everything:
#
#   make book            set up .venv, build the site from the stored outputs
#   make book EXECUTE=1  first re-execute every chapter at full size (refreshes stored outputs;
#                        JOBS=2 chapters at a time)
#   make test            set up .venv, check it (make doctor), run ruff, the unit tests, every
#                        chapter (nbval, CI size), build the site and check it and a chapter in
#                        JupyterLab in a headless browser
#   make lab             set up .venv and open JupyterLab on the chapters, with the book's kernel
#
# Smaller steps: make setup | doctor | lint | unit | nbval | site | site-check | lab-check | sync
#                make format | make kernel  (register the kernel for your own Jupyter or editor)
#                make charts     (store the chapters' charts as Vega-Lite MIME bundles, in place)
#                make listings   (refresh the chapters' package listings and solution toggles)
#                make times      (the chapters' Time lines and the time tables, from measurements)
#                make figures    (draw the diagrams in notebooks/figures again from their source)
#                make execute CHAPTER=02_self_attention   (one chapter, full size, in place)
#                make records [JOBS=2 THREADS=1]   (train and record the book's unrecorded runs)
#                make lock [UPGRADE=1]   re-resolve .ci/requirements.lock (see README)
#                make exercises CHAPTER=06   (grade notebooks/exercises/06_*.py; SOLUTIONS=1:
#                  the reference solutions; FILE=answers.py: that file; SEED=N: a run's inputs)
#                make handout [OUT=dist/handout]  (student and teacher editions, Otter export)
#                make mark SUBMISSIONS=folder [CHAPTER=06]  (mark a class: marks/marks.csv)

# Written for GNU make 3.81 (macOS) as well: .SHELLFLAGS (make >= 3.82) is ignored there, so no
# recipe relies on it; multi-command lines chain with && or exit explicitly.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
# Every dependency at an exact version (runtime, dev and book extras): `make setup` installs
# only this. `make lock` re-resolves it with uv, for Python 3.11, on every platform.
LOCK := .ci/requirements.lock
UV_VERSION := 0.13.9
# Installed first, and pinned: a bare `torch` requirement pulls the newest CUDA build (GBs).
# TORCH_INDEX picks a build of the same version from PyTorch's index, e.g. the CPU build on a
# Linux laptop (https://download.pytorch.org/whl/cpu) or a CUDA one (.../whl/cu128).
TORCH_VERSION := 2.13.0
TORCH_INDEX ?=
TORCH_FROM := $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX) --extra-index-url https://pypi.org/simple)
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# The real datasets, when a local mirror sits beside the checkout (CI and development).
SHARED_DATA := $(abspath ../shared/data)
export AT_DATA_MIRROR ?= $(if $(wildcard $(SHARED_DATA)/README.md),$(SHARED_DATA),)
# Keep Python output unbuffered and the Jupyter noise down.
export PYTHONUNBUFFERED := 1
export JUPYTER_PLATFORM_DIRS := 1
export PYDEVD_DISABLE_FILE_VALIDATION := 1

# Chapters run on one intra-op thread, when stored and when checked: the order of the sums
# inside a matrix product depends on the thread count, and strict nbval compares last digits.
NOTEBOOK_ENV := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

SITE := book/_build/html
CHAPTERS := $(sort $(wildcard notebooks/[0-9][0-9]_*.py))
NBVAL := -p no:cacheprovider -p annotated_transformer.book.nbval_json \
         --nbval --nbval-current-env --nbval-cell-timeout=900 \
         --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: help setup doctor lock test book lint unit nbval site site-check chromium sync format records \
        execute times listings figures exercises mark handout clean lab kernel lab-check charts

help:
	@sed -n '1,22p' Makefile

# The venv's Python must be 3.11 or newer: say so, instead of failing deep inside pip.
$(PY):
	@test -n "$(PYTHON)" && $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "make setup needs Python 3.11 (found: $(or $(PYTHON),no python3)). Install it (python.org,"; \
	  echo "Homebrew: brew install python@3.11, or: uv python install 3.11), then run"; \
	  echo "make setup PYTHON=/path/to/python3.11"; exit 1; }
	@echo "==> Creating $(VENV) with $(PYTHON) ($$($(PYTHON) --version))"
	$(PYTHON) -m venv $(VENV)

# torch first (pinned; the lock as constraints keeps its dependencies at the locked versions),
# then exactly the lock, then this package without resolving anything more.
$(STAMP): pyproject.toml $(LOCK) | $(PY)
	@echo "==> Installing torch $(TORCH_VERSION) and $(LOCK) into $(VENV)"
	$(PIP) "torch==$(TORCH_VERSION)" -c $(LOCK) $(TORCH_FROM)
	$(PIP) -r $(LOCK)
	$(PIP) --no-deps -e .
	$(PY) -m annotated_transformer.book.jupyter
	touch $@

setup: $(STAMP)

# Python, torch and its build, bf16 speed, threads, datasets, the browser, the lock's state.
# Exits non-zero only when something `make test` needs is missing.
doctor:
	@test -x $(PY) || { echo "doctor: no $(VENV) yet: run make setup"; exit 1; }
	@PYTHONPATH=src $(PY) -m annotated_transformer.doctor

# Re-resolve the lock on purpose: after changing dependencies in pyproject.toml (versions already
# locked are kept), or with UPGRADE=1 for the newest releases. Then re-execute the chapters.
lock: | $(PY)
	$(PIP) "uv==$(UV_VERSION)"
	echo "torch==$(TORCH_VERSION)" > $(VENV)/torch-pin.txt
	$(BIN)/uv pip compile pyproject.toml --extra dev --extra book --extra lab --universal --python-version 3.11 \
	  --constraints $(VENV)/torch-pin.txt --excludes .ci/lock-excludes.txt $(if $(UPGRADE),--upgrade) \
	  --custom-compile-command "make lock" --quiet --output-file $(LOCK)
	@echo "==> $(LOCK) re-resolved: make setup, make book EXECUTE=1 (stored outputs), make test"

test: setup chromium
	@echo "==> environment"
	$(MAKE) --no-print-directory doctor
	@echo "==> ruff"
	$(MAKE) --no-print-directory lint
	@echo "==> unit tests and book structure"
	$(MAKE) --no-print-directory unit
	@echo "==> every chapter, CI size (nbval, strict)"
	$(MAKE) --no-print-directory nbval
	@echo "==> site"
	$(MAKE) --no-print-directory site site-check
	@echo "==> a chapter in JupyterLab"
	$(MAKE) --no-print-directory lab-check

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

unit: setup
	$(PY) -m pytest -q tests

# Two groups of chapters at once, one thread each, of about equal time (a chapter reuses
# only runs of its own group: 11 and 12 read 10's, 16 and 17 read 13's); the first group's
# report follows the second's.
NBVAL_FIRST := $(wildcard notebooks/0[1-9]_*.ipynb notebooks/1[0-2]_*.ipynb notebooks/1[45]_*.ipynb)
NBVAL_SECOND := $(filter-out $(NBVAL_FIRST),$(wildcard notebooks/[0-9][0-9]_*.ipynb))

nbval: setup
	@log=$$(mktemp) && first=0 && second=0 && \
	{ $(NOTEBOOK_ENV) AT_SIZE=ci $(PY) -m pytest -q $(NBVAL) $(NBVAL_FIRST) > $$log 2>&1 & \
	  pid=$$!; } && \
	{ $(NOTEBOOK_ENV) AT_SIZE=ci $(PY) -m pytest -q $(NBVAL) $(NBVAL_SECOND) || second=$$?; } && \
	{ wait $$pid || first=$$?; } && \
	echo "==> chapters $(notdir $(basename $(NBVAL_FIRST)))" && \
	cat $$log && rm -f $$log && test $$first = 0 && test $$second = 0

# EXECUTE=1: the chapters JOBS at a time (each on one thread), in the order of the book;
# the whole build's wall time, site included, is recorded in book/build.json.
book: setup
ifeq ($(EXECUTE),1)
	@start=$$(date +%s) && \
	$(MAKE) --no-print-directory -j$(JOBS) $(CHAPTERS:notebooks/%.py=execute-%) && \
	$(PY) -m annotated_transformer.book.times && \
	$(MAKE) --no-print-directory site && \
	$(PY) -m annotated_transformer.book.times --jobs $(JOBS) \
	  --build-seconds $$(( $$(date +%s) - start ))
else
	$(MAKE) --no-print-directory site
endif
	@echo
	@echo "The book is built. Open: file://$(abspath $(SITE))/index.html"

site: setup
	$(BIN)/jupyter-book build --warningiserror --quiet book

site-check: setup chromium
	$(PY) tests/site_check.py $(SITE)
	$(PY) tests/explorables_check.py $(SITE)

# JupyterLab on the chapters, with the kernel "Transformers from Scratch" (this venv), .py
# chapters opening as notebooks, the chapters trusted as stored (the book's Jupyter set-up
# written again first: it may be newer than the venv); Ctrl-C stops it.
lab: setup
	$(PY) -m annotated_transformer.book.jupyter --trust notebooks
	$(BIN)/jupyter lab --ServerApp.root_dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

# The same kernel for a Jupyter installed elsewhere (conda, pipx) or an editor (VS Code).
kernel: setup
	$(PY) -m annotated_transformer.book.jupyter --user

# A chapter (as .py and as .ipynb, a copy) in headless JupyterLab on 127.0.0.1, network
# blocked: stored charts and MyST drawn, every cell run at CI size, no error.
lab-check: setup chromium
	$(NOTEBOOK_ENV) AT_SIZE=ci $(PY) tests/lab_check.py

# After merging chapters whose stored outputs still hold Altair's HTML charts.
charts: setup
	$(PY) -m annotated_transformer.book.charts $(CHAPTERS:.py=.ipynb)

# Re-execute one chapter at full size, keeping the .py/.ipynb pair in sync. Jupyter stores
# each cell's start and end in the notebook: the chapter's measured run time, which its
# Time line and the preface's and teachers' tables state (make times writes them again).
execute: setup
	@test -n "$(CHAPTER)" || { echo "usage: make execute CHAPTER=02_self_attention"; exit 2; }
	@echo "==> executing notebooks/$(CHAPTER) at full size"
	@start=$$(date +%s) && \
	AT_SIZE=full $(BIN)/jupytext --sync notebooks/$(CHAPTER).py && \
	$(NOTEBOOK_ENV) AT_SIZE=full $(BIN)/jupyter execute --inplace --timeout=-1 \
	  notebooks/$(CHAPTER).ipynb && \
	$(BIN)/jupytext --sync notebooks/$(CHAPTER).ipynb && \
	echo "==> notebooks/$(CHAPTER) executed in $$(( $$(date +%s) - start )) s (make times: its Time line)"

execute-%: setup
	@$(MAKE) --no-print-directory execute CHAPTER=$*

# Train and record, one after another, every run the chapters execute that has no record in
# results/ yet (annotated_transformer.book.runs lists them): hours on a laptop's CPU.
JOBS ?= 2
THREADS ?= 1
records: setup
	$(PY) -m annotated_transformer.book.runs --missing --jobs $(JOBS) --threads $(THREADS)

# Grade one chapter's exercises. Needs the venv but never installs anything (no
# setup prerequisite), so a reader can run it as often as they like.
# Grading needs the venv: from a fresh clone the first call sets it up (as make book does).
exercises: setup
	@test -n "$(CHAPTER)" || { \
	  echo "usage: make exercises CHAPTER=06 [SOLUTIONS=1] [FILE=answers.py] [SEED=N]"; exit 2; }
	@PYTHONPATH=src $(PY) -m annotated_transformer.exercises $(CHAPTER) \
	  $(if $(filter 1,$(SOLUTIONS)),--solutions) $(if $(FILE),--file $(FILE)) \
	  $(if $(SEED),--seed $(SEED))

# Mark a class (book/teachers.md): every submission in SUBMISSIONS (a file or a folder per
# student) graded, isolated, in parallel; MARKS/marks.csv, marks.json, feedback per student.
MARKS ?= marks
mark: setup
	@test -n "$(SUBMISSIONS)" || { \
	  echo "usage: make mark SUBMISSIONS=folder [CHAPTER=06] [MARKS=marks] [SEED=N]"; exit 2; }
	@PYTHONPATH=src $(PY) -m annotated_transformer.exercises mark $(SUBMISSIONS) \
	  $(if $(CHAPTER),--chapter $(CHAPTER)) --out $(MARKS) \
	  $(if $(SEED),--seed $(SEED))

# The hand-outs (book/teachers.md): OUT/student without the solutions, OUT/teacher with
# them, OUT/otter the Otter-Grader assignment.
OUT ?= dist/handout
handout: setup
	PYTHONPATH=src $(PY) -m annotated_transformer.exercises.handout $(OUT)

# The times the book states, from the chapters, their stored cell timings and the records.
times: setup
	$(PY) -m annotated_transformer.book.times

# After a change to package code that a chapter shows: render its stored listings again;
# and write the exercises' solution toggles again from notebooks/exercises/solutions/.
listings: setup
	$(PY) -m annotated_transformer.book.listings $(CHAPTERS:.py=.ipynb)
	$(PY) -m annotated_transformer.exercises.toggles

# The diagrams: annotated_transformer/book/figures.py -> notebooks/figures/*.svg (committed;
# a unit test checks them). Needs only the venv's Python and torch, not a fresh setup.
figures:
	PYTHONPATH=src $(PY) -m annotated_transformer.book.figures notebooks/figures

sync: setup
	$(BIN)/jupytext --sync $(CHAPTERS)

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The site check needs a Chromium-family browser (Chromium, Chrome, Edge, Playwright's own; see
# the doctor). None found: install Debian's chromium where apt-get and root or sudo are at hand,
# else say in one line how to get one. `make book` never needs a browser.
chromium: setup
	@$(PY) -m annotated_transformer.doctor --browser >/dev/null || { \
	  if command -v apt-get >/dev/null && { [ "$$(id -u)" = 0 ] || command -v sudo >/dev/null; }; then \
	    echo "==> installing Debian's chromium for the site check"; \
	    $(SUDO) apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  fi; \
	  $(PY) -m annotated_transformer.doctor --browser >/dev/null || { \
	    $(PY) -m annotated_transformer.doctor --browser; exit 1; }; }

clean:
	rm -rf $(SITE) book/_build .pytest_cache .ruff_cache
