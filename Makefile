# specdash: `make run` serves the dashboard (embedded default), `make test` runs every check.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test system-deps venv engines engines-llamacpp lint typecheck pytest pytest-clock pytest-browser torture bench bench-simulator bench-loadgen bench-transport bench-lifecycle bench-telemetry bench-jobs clean

$(VENV)/.runtime-installed: requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	@touch $@

$(VENV)/.dev-installed: requirements.txt requirements-dev.txt $(VENV)/.runtime-installed
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	@touch $@

# Real inference engines for the tests marked by engine (built once per machine, into a cache
# outside the clone keyed by version: engines/build_llama_server.sh).
engines: engines-llamacpp

engines-llamacpp: $(VENV)/.dev-installed
	PYTHON=$(PY) engines/build_llama_server.sh

# exec: make's child is the dashboard itself, which shuts down when make dies (even by SIGKILL).
run: $(VENV)/.runtime-installed
	$(PY) manage.py migrate --no-input -v 0
	$(PY) manage.py seed_demo
	exec $(PY) manage.py serve --host $(HOST) --port $(PORT) --exit-with-parent

# Every check, in stages, with each stage's wall time at the end (scripts/test.sh). It installs
# the system packages the tests need (scripts/system-deps.sh), so a fresh clone needs nothing else.
test:
	@bash scripts/test.sh

system-deps:
	@bash scripts/system-deps.sh

venv: $(VENV)/.dev-installed

lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.dev-installed
	$(VENV)/bin/mypy .

# Browser tests run in their own invocation: Playwright's sync API leaves an event loop
# running that would break the asyncio tests after it.
pytest: $(VENV)/.dev-installed
	$(VENV)/bin/pytest -m "not browser"

# The load generator's tests again with the machine's monotonic clock started just below 2^24 s
# and 2^30 s: no figure, and no test tolerance, may depend on the machine's uptime.
pytest-clock: $(VENV)/.dev-installed
	$(PY) -m tests.fixtures.clockshift 16775716 -- $(VENV)/bin/pytest -q -p no:cacheprovider tests/loadgen
	$(PY) -m tests.fixtures.clockshift 1073740324 -- $(VENV)/bin/pytest -q -p no:cacheprovider tests/loadgen

pytest-browser: $(VENV)/.dev-installed
	$(VENV)/bin/pytest -m browser

# The lifecycle torture alone, with its table of case -> outcome on the terminal.
torture: $(VENV)/.dev-installed
	$(VENV)/bin/pytest -q -s tests/hosts/lifecycle/test_torture.py

bench: bench-simulator bench-loadgen bench-transport bench-lifecycle bench-telemetry bench-jobs

bench-simulator: $(VENV)/.dev-installed
	$(PY) -m benchmarks.perf.bench_simulator

bench-loadgen: $(VENV)/.dev-installed
	$(PY) -m benchmarks.perf.bench_loadgen

bench-transport: $(VENV)/.dev-installed
	$(PY) -m benchmarks.perf.bench_transport

bench-lifecycle: $(VENV)/.dev-installed
	$(PY) -m benchmarks.perf.bench_lifecycle

bench-telemetry: $(VENV)/.dev-installed
	$(PY) -m benchmarks.perf.bench_telemetry

bench-jobs: $(VENV)/.dev-installed
	$(PY) -m benchmarks.perf.bench_jobs

clean:
	rm -rf $(VENV) var .mypy_cache .ruff_cache .pytest_cache
