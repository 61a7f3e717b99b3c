# The two commands of the README: `make run` (the main job on embedded defaults: SQLite and a
# filesystem broker) and `make test` (the whole suite). Both install what they need first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: run test fast lint bench browser-deps

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

# `make run ARGS="--duration 60 --seed 7"` passes options to `manage.py launch`.
run: $(STAMP)
	$(PY) manage.py launch $(ARGS)

test: $(STAMP) browser-deps
	$(PY) -m pytest $(PYTEST_ARGS)

# Without the slow tests (real workers, servers, browsers), on $(WORKERS) processes (pytest-xdist).
WORKERS ?= 2
fast: $(STAMP)
	$(PY) -m pytest -m "not slow" -n $(WORKERS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

browser-deps:
	@bash scripts/ensure-chromium
