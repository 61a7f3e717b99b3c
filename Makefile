# The two commands of the README: `make run` (the main job on embedded defaults: SQLite and a
# filesystem broker) and `make test` (the whole suite). Both install what they need first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: run test fast lint bench browser-deps proxy-deps

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

# `make run ARGS="--duration 60 --seed 7"` passes options to `manage.py launch`, exec'd: no
# shell stands between make and the launcher, which watches make for the signals make keeps.
run: $(STAMP)
	exec $(PY) manage.py launch $(ARGS)

# The fast tests run on $(WORKERS) processes (pytest-xdist, its default `load` distribution: each
# worker keeps pytest-django's order, so no test runs on a database a transactional test flushed).
WORKERS ?= 2

# The whole suite: the fast tests in parallel; then the slow ones (real workers, servers, browsers)
# in parallel too, a whole module per worker (`--dist loadscope`: a module's shared servers and
# its launch of the main job start once); then the slow tests marked `serial` (timing bounds,
# kill-and-recover bounds, cluster-wide reads) in one process, alone. Every slow test uses a
# transactional database (restored at its start) or none, so a module never finds a database that
# another one flushed. Exit 5 is "none selected": each run may select none, not all three.
test: $(STAMP) browser-deps proxy-deps
	@mkdir -p var
	$(PY) -m pytest -m "not slow" -n $(WORKERS) --junitxml=var/junit-fast.xml $(PYTEST_ARGS); \
	fast=$$?; \
	$(PY) -m pytest -m "slow and not serial" -n $(WORKERS) --dist loadscope \
		--junitxml=var/junit-slow.xml $(PYTEST_ARGS); slow=$$?; \
	$(PY) -m pytest -m "slow and serial" --junitxml=var/junit-serial.xml $(PYTEST_ARGS); \
	serial=$$?; \
	$(PY) scripts/test-totals var/junit-fast.xml var/junit-slow.xml var/junit-serial.xml; \
	for rc in $$fast $$slow $$serial; do case $$rc in 0|5) ;; *) exit 1 ;; esac; done; \
	test "$$fast $$slow $$serial" != "5 5 5"

fast: $(STAMP)
	$(PY) -m pytest -m "not slow" -n $(WORKERS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

browser-deps:
	@bash scripts/ensure-chromium

# The framing suite runs through nginx too (deploy/nginx/).
proxy-deps:
	@bash scripts/ensure-nginx
