# vcpulab: `make demo` builds everything and runs the quickstart; `make test` runs every test.
# Needs only a Rust toolchain, Python >= 3.11 with pip, and PyPI.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q
# maturin installs into the environment named by VIRTUAL_ENV.
DEVELOP := PIP_QUIET=1 VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/maturin develop -q

.PHONY: demo test bench reproduce install native tracefs build-dev build-release clean

demo: install
	$(BIN)/vcpulab run examples/quickstart.toml

# pytest twice: the tests that simulate in parallel on every core (pytest-xdist), then the ones
# that time real programs on this machine (marker `measures`) alone; each lists its slowest tests.
test: install tracefs
	@if cargo nextest --version >/dev/null 2>&1; then \
		echo "cargo nextest run --workspace --release"; \
		cargo nextest run --workspace --release; \
	else \
		echo "cargo test --workspace --release (cargo-nextest not found)"; \
		cargo test --workspace --release; \
	fi
	cargo test --release --doc -p vcpulab-sim
	$(BIN)/pytest -q -n auto -m "not measures" --durations=15 tests
	$(BIN)/pytest -q -m measures --durations=5 tests

bench: install
	cargo bench -p vcpulab-sim
	$(BIN)/vcpulab bench

# The reproduction suite (experiments/published): every published experiment run and scored, into
# one resumable results store, each testbed with its calibrated preset (calibrated/*.toml,
# docs/calibration.md); the full scoreboard is written to docs/scoreboard.md (docs/reproduce.md).
CALIBRATED := $(foreach f,$(wildcard calibrated/*-cal.toml),--calibrated $(f))
reproduce: install
	$(BIN)/vcpulab reproduce -j 2 --results results/reproduce $(CALIBRATED) --markdown docs/scoreboard.md

# Optimised native module installed (editable Python sources) into .venv, with test tools;
# and the native programs and LD_PRELOAD libraries of the bridge commands.
install: $(BIN)/maturin native
	$(DEVELOP) --release -E test

# The system-call counts of characterize, mitigate and trace are perf counters on tracepoints,
# whose ids are read from tracefs. A fresh machine may not have it mounted: mount it when we may
# (root), else say what that means. Never fails: the tests that need the counts skip, saying why.
tracefs:
	@if [ -d /sys/kernel/tracing/events ] || [ -d /sys/kernel/debug/tracing/events ]; then :; \
	elif [ "$$(id -u)" = 0 ] && [ -d /sys/kernel/tracing ] && mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null; then \
		echo "mounted tracefs on /sys/kernel/tracing (for the system-call counts of characterize, mitigate, trace)"; \
	else \
		echo "tracefs is not mounted and cannot be mounted here (needs root): system-call counts show as unavailable, and the tests that need them skip"; \
	fi

# The pathology workloads and the tracer (C, gcc): target/native/{bin,lib}.
native:
	$(MAKE) -s -C tracer

# Debug build of the native module into .venv: compiles faster, runs much slower.
build-dev: $(BIN)/maturin
	$(DEVELOP) -E test

# A release wheel in dist/.
build-release: $(BIN)/maturin
	$(BIN)/maturin build --release -o dist

$(BIN)/maturin: $(BIN)/python
	$(PIP) install 'maturin>=1.9,<2.0'
	@touch $@

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

clean:
	rm -rf $(VENV) target dist python/vcpulab/_vcpulab*.so .pytest_cache
	find python tests -name __pycache__ -type d -prune -exec rm -rf {} +
