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

# The fast tests run on $(WORKERS) processes (pytest-xdist, its default `load` distribution: each
# worker keeps pytest-django's order, so no test runs on a database a transactional test flushed).
WORKERS ?= 2

# The whole suite: the fast tests in parallel, then the slow ones (real workers, servers, browsers,
# kill-and-recover bounds) one at a time, as they were written to run. Exit 5 is "none selected".
test: $(STAMP) browser-deps
	@mkdir -p var
	$(PY) -m pytest -m "not slow" -n $(WORKERS) --junitxml=var/junit-fast.xml $(PYTEST_ARGS); \
	fast=$$?; $(PY) -m pytest -m slow --junitxml=var/junit-slow.xml $(PYTEST_ARGS); slow=$$?; \
	$(PY) scripts/test-totals var/junit-fast.xml var/junit-slow.xml; \
	case "$$fast $$slow" in "0 0"|"0 5"|"5 0") ;; *) exit 1 ;; esac

fast: $(STAMP)
	$(PY) -m pytest -m "not slow" -n $(WORKERS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

browser-deps:
	@bash scripts/ensure-chromium
