# Transformers from Scratch — two commands do everything:
#
#   make book            set up .venv, build the site from the stored outputs
#   make book EXECUTE=1  first re-execute every chapter at full size (refreshes stored outputs)
#   make test            set up .venv, run ruff, the unit tests, every chapter (nbval, CI size),
#                        build the site and check it in headless Chromium
#
# Smaller steps: make setup | lint | unit | nbval | site | site-check | sync | format
#                make execute CHAPTER=02_self_attention   (one chapter, full size, in place)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
# Installed first, and pinned: a bare `torch` requirement pulls the newest CUDA build (GBs).
TORCH_VERSION := 2.13.0
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
NBVAL := -p no:cacheprovider --nbval --nbval-current-env --nbval-cell-timeout=900 \
         --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: help setup test book lint unit nbval site site-check chromium sync format execute clean

help:
	@sed -n '1,12p' Makefile

$(STAMP): pyproject.toml
	@echo "==> Setting up $(VENV) with $(PYTHON) ($$($(PYTHON) --version))"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check "torch==$(TORCH_VERSION)"
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev,book]"
	touch $@

setup: $(STAMP)

test: setup chromium
	@echo "==> ruff"
	$(MAKE) --no-print-directory lint
	@echo "==> unit tests and book structure"
	$(MAKE) --no-print-directory unit
	@echo "==> every chapter, CI size (nbval, strict)"
	$(MAKE) --no-print-directory nbval
	@echo "==> site"
	$(MAKE) --no-print-directory site site-check

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

unit: setup
	$(PY) -m pytest -q tests

nbval: setup
	$(NOTEBOOK_ENV) AT_SIZE=ci $(PY) -m pytest -q $(NBVAL) notebooks/

book: setup
ifeq ($(EXECUTE),1)
	@for nb in $(CHAPTERS:.py=.ipynb); do $(MAKE) --no-print-directory execute CHAPTER=$$(basename $$nb .ipynb); done
endif
	$(MAKE) --no-print-directory site
	@echo
	@echo "The book is built. Open: file://$(abspath $(SITE))/index.html"

site: setup
	$(BIN)/jupyter-book build --warningiserror --quiet book

site-check: setup chromium
	$(PY) tests/site_check.py $(SITE)

# Re-execute one chapter at full size, keeping the .py/.ipynb pair in sync.
execute: setup
	@test -n "$(CHAPTER)" || { echo "usage: make execute CHAPTER=02_self_attention"; exit 2; }
	@echo "==> executing notebooks/$(CHAPTER) at full size"
	AT_SIZE=full $(BIN)/jupytext --sync notebooks/$(CHAPTER).py
	$(NOTEBOOK_ENV) AT_SIZE=full $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	  --ExecutePreprocessor.timeout=-1 notebooks/$(CHAPTER).ipynb
	$(BIN)/jupytext --sync notebooks/$(CHAPTER).ipynb

sync: setup
	$(BIN)/jupytext --sync $(CHAPTERS)

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Debian's chromium renders the site for the site check; installed when missing.
chromium:
	@command -v chromium >/dev/null || { \
	  echo "==> installing Debian's chromium for the site check"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

clean:
	rm -rf $(SITE) book/_build .pytest_cache .ruff_cache
