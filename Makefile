# The book's commands. `make book` and `make test` work on a fresh machine with only Python 3.11:
# the first target that needs the environment creates .venv and installs everything into it.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(abspath $(VENV))/bin
INSTALLED := $(VENV)/.installed
BROWSER_DEPS := tests/browser/node_modules/.installed
SITE := _build/html
PORT ?= 8000

# Kernels started by nbclient and nbval find the venv's python first; no frozen-module debugger
# warning on stderr; hash seeds fixed so set iteration order is reproducible.
export PATH := $(BIN):$(PATH)
export PYDEVD_DISABLE_FILE_VALIDATION := 1
export PYTHONHASHSEED := 0

.PHONY: book test lint unit nbval links browser notebooks lab serve clean

$(INSTALLED): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

## book: build the static site with warnings as errors (always from scratch)
book: $(INSTALLED)
	rm -rf _build
	$(BIN)/jupyter-book build --all -W -n --keep-going .
	@echo "The book is at $(abspath $(SITE))/index.html  (serve it with: make serve)"

## test: lint, package tests, strict nbval on committed outputs, strict build, links, browser check
test: lint unit nbval book links browser

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check code tests

unit: $(INSTALLED)
	$(BIN)/pytest -m "not browser and not site"

nbval: $(INSTALLED)
	$(BIN)/pytest -p no:cacheprovider --nbval --nbval-current-env \
		--nbval-sanitize-with nbval.cfg chapters/

$(BROWSER_DEPS): tests/browser/package.json tests/browser/package-lock.json
	npm ci --prefix tests/browser --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

## links: the built site's internal links and anchors, and which pages load the widget manager
links: $(INSTALLED)
	$(BIN)/pytest -m site
	@echo "External links (listed, not fetched): $(abspath _build/external-links.txt)"

browser: $(INSTALLED) $(BROWSER_DEPS)
	$(BIN)/pytest -m browser

## notebooks: execute every chapter in place, saving widget state and outputs
notebooks: $(INSTALLED)
	$(BIN)/python -m transformer_tutorial.book.notebooks chapters/*.ipynb

$(VENV)/.lab-installed: $(INSTALLED) requirements-lab.txt
	$(BIN)/python -m pip install --quiet -r requirements-lab.txt
	touch $@

## lab: JupyterLab on the chapters (installs it into .venv the first time)
lab: $(VENV)/.lab-installed
	$(BIN)/jupyter lab chapters/

## serve: the built site on http://localhost:$(PORT)
serve:
	@test -d $(SITE) || { echo "No site yet: run 'make book' first"; exit 1; }
	$(PYTHON) -m http.server $(PORT) --bind 127.0.0.1 --directory $(SITE)

clean:
	rm -rf _build .pytest_cache .ruff_cache tests/browser/node_modules
