# aifactory developer entry points. A fresh Debian/Ubuntu machine needs only Python 3.11, make and apt.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup synth validate policy test bench mutate lint tools promtool amtool redis contracts clean

# The stamp depends on pyproject.toml and on this file (UV_VERSION, the install steps) so a changed pin reinstalls.
UV_VERSION := 0.13.9
UV_PIP := $(BIN)/uv pip install --quiet --system-certs --python $(BIN)/python
$(VENV)/.installed: pyproject.toml Makefile
	@# Debian's and Ubuntu's Pythons need their pythonX.Y-venv package for `-m venv` (for the version of the Python used, which
	@# need not be the system's default python3); install it only when venv creation fails.
	$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV) && $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q \
	    "python$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv" && $(PYTHON) -m venv $(VENV); }
	@# uv resolves the same versions as pip and installs them in a fraction of the time (parallel downloads). Bytecode
	@# is not compiled here (21 s of ~230 packages, most never imported): `make test` lifts CI's PYTHONDONTWRITEBYTECODE,
	@# so what the tests import is compiled once, by its first importer, and read back by every later process. uv reads
	@# no pip.conf: it installs from PyPI, with the system's certificates as pip is configured to.
	$(BIN)/python -m pip install --quiet 'uv==$(UV_VERSION)'
	$(UV_PIP) -e '.[test]'
	@# The threading instrumentation's pins are overridden in pyproject.toml ([tool.uv] override-dependencies).
	@# xds-protos (Envoy's ext_proc messages for the token budget service) ships an older copy of opentelemetry-proto's
	@# modules (opentelemetry/proto/**/*_pb2.py) into the same directory: whichever wheel is unpacked last wins, and the
	@# older copy lacks InstrumentationScope, which the OTLP exporters import. Reinstalling opentelemetry-proto last makes
	@# its files win whatever order uv unpacked them in (the budget service's image installs no OpenTelemetry).
	$(UV_PIP) --reinstall --no-deps "opentelemetry-proto==$$($(BIN)/python -c 'from importlib.metadata import version; print(version("opentelemetry-proto"))')"
	touch $@

setup: $(VENV)/.installed ## .venv with the kit (editable) and its test tools

synth: setup ## render the dev stack offline into build/dev (STACK=... for another)
	$(BIN)/aifactory synth $(STACK)

validate: setup ## check a stack's config, every problem with its key path (STACK=...)
	$(BIN)/aifactory validate $(STACK)

policy: synth ## the policy pack over build/$(STACK)/state.json, each violation with its fix
	$(BIN)/aifactory policy check build/$(STACK)/state.json

# The real tools the tests and benches run, from Debian's packages: prometheus (promtool, prometheus),
# prometheus-alertmanager (amtool), redis-server (the token budget store), nghttp2-client (h2load: the gateway
# overhead bench's load generator, tests/support/loadgen.py). One apt-get for whichever are missing.
TOOLS := promtool:prometheus prometheus:prometheus amtool:prometheus-alertmanager redis-server:redis-server \
	h2load:nghttp2-client
tools:
	@missing=$$(for t in $(TOOLS); do command -v $${t%%:*} >/dev/null || echo $${t##*:}; done | sort -u); \
	[ -z "$$missing" ] || { $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$missing; }
promtool amtool redis: tools

# The suite runs on every core (pytest-xdist, a worker per core and one more; TEST_WORKERS=0 for one process).
# Each test file stays on one worker
# (--dist loadfile): a file's module fixtures (a backfilled Prometheus, a live Envoy) start once, not per worker.
# PYTHONDONTWRITEBYTECODE (CI sets it) is lifted for the run: the kit's own modules and pytest's rewritten test and
# plugin modules are then compiled once and read back by the other worker and by the CLI processes the tests start,
# not compiled again in each (a worker's collection: 20 s CPU without the cache, 12 s with it).
# One worker more than the cores: the suite's live tests spend much of their time waiting on real time (a check's
# interval, a scrape, a fake model's reply), which a third worker fills on 2 cores (one clone, one run after the other:
# 375 s with 2 workers, 298 s with 3; CONTRIBUTING.md). Tests marked `alone` still run with no other test beside them.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
test: setup tools ## the whole suite (unit, artifacts with real tools, node suite replays), in parallel
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

bench: setup tools ## benchmarks; prints figures, asserts nothing about time
	$(BIN)/python -m tests.bench

# Mutation testing of the modules that encode decisions (not CI: slow). MUTATE=<module.py ...> narrows it;
# mutmut is installed here, on first use, rather than in the test extras.
MUTMUT_VERSION := 3.8.1
mutate: setup promtool ## mutation score per decision module (mutmut); MUTATE="policies/fabric.py" for one; MUTATE="infra/stack/models.py --sample 200 --seed 22" estimates a slow one from 200 mutants
	@$(BIN)/python -c "import mutmut" 2>/dev/null || $(UV_PIP) 'mutmut==$(MUTMUT_VERSION)'
	$(BIN)/python -m tests.mutation $(MUTATE)

# The kit's `vllm serve` command lines through vLLM's own argument parser, at each pinned version (the stock
# image's and the EFA DLC's): one throwaway venv per version under build/contracts (vLLM pulls torch: GBs, minutes;
# not CI). CI checks the same command lines against the options recorded from the sources
# (tests/fixtures/engines/cli.yaml, tests/unit/test_engine_contracts.py).
CONTRACT_VLLM_VERSIONS ?= 0.33.0 0.27.1
contracts: setup ## engine flags through the engines' own parsers (downloads vLLM + torch; not CI)
	mkdir -p build/contracts
	$(BIN)/python -m tests.contracts.engine_commands > build/contracts/vllm-commands.json
	set -e; for v in $(CONTRACT_VLLM_VERSIONS); do \
	  [ -x build/contracts/vllm-$$v/bin/python ] || { $(PYTHON) -m venv build/contracts/vllm-$$v && \
	    build/contracts/vllm-$$v/bin/python -m pip install --quiet "vllm==$$v"; }; \
	  build/contracts/vllm-$$v/bin/python tests/contracts/vllm_parse.py build/contracts/vllm-commands.json; \
	done

lint: setup
	$(BIN)/ruff check infra components dashboards policies telemetry tests
	$(BIN)/mypy infra components

clean:
	rm -rf build .pytest_cache
