# engage: the two commands are `make quickstart` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Debian packages the integration tests need (servers they start themselves on 127.0.0.1,
# and the headless browser the dashboard test loads the app in).
SYSTEM_PACKAGES := postgresql prometheus chromium

.PHONY: quickstart test test-unit system-deps lint format bench constraints clean

# Create .venv and install engage with the exact tested dependency set.
$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; engage needs Python 3.11"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

## Set up .venv and run the quickstart pipeline end to end (about two minutes after install).
quickstart: $(STAMP)
	$(BIN)/engage quickstart

## Install what the tests need and run the whole suite (unit, integration, e2e) in three
## lanes side by side (tests/lanes.py says why); each lane prints its 30 slowest tests.
test: $(STAMP) system-deps lint
	$(BIN)/python tests/lanes.py

system-deps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

## The Streamlit dashboard on http://127.0.0.1:$(DASHBOARD_PORT), reading ENGAGE_HOME
## (default ./.engage), ENGAGE_EVENTS_URI and MLFLOW_TRACKING_URI; Ctrl-C stops it.
DASHBOARD_PORT ?= 8501
.PHONY: dashboard
dashboard: $(STAMP)
	$(BIN)/python -m streamlit run dashboard/app.py --server.headless=true \
	  --server.address=127.0.0.1 --server.port=$(DASHBOARD_PORT) --browser.gatherUsageStats=false \
	  --client.toolbarMode=viewer

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## Run every benchmark script; each rewrites its section of docs/BENCHMARKS.md.
bench: $(STAMP) system-deps
	$(BIN)/python benchmarks/quickstart_walltime.py
	$(BIN)/python benchmarks/monitor_overhead.py
	$(BIN)/python benchmarks/serving_latency.py
	$(BIN)/python benchmarks/drift_detection.py
	$(BIN)/python benchmarks/drift_detection.py --target ert
	$(BIN)/python benchmarks/federated_defences.py
	$(BIN)/python benchmarks/tracking_overhead.py
	$(BIN)/python benchmarks/dataset_schema.py
	$(BIN)/python benchmarks/input_pipeline.py
	$(BIN)/python benchmarks/streaming_ingest.py
	$(BIN)/python benchmarks/recovery.py
	$(BIN)/python benchmarks/mixed_precision.py
	$(BIN)/python benchmarks/scaling_plan.py
	$(BIN)/python benchmarks/simulator_throughput.py
	$(BIN)/python benchmarks/simulator_realdata.py
	$(BIN)/python benchmarks/tuning_asha.py
	$(BIN)/python benchmarks/adaptive_sampling.py
	$(BIN)/python benchmarks/suite_time.py  # the test suite twice (~26 min on 2 cores)

## Regenerate constraints.txt from the current .venv (after changing dependencies).
constraints: $(STAMP)
	( echo "# The exact tested set. Regenerate with: make constraints"; \
	  $(BIN)/python -m pip freeze --exclude-editable | sed -e 's/^torch==.*/torch==2.13.0/' ) > constraints.txt

clean:
	rm -rf .engage .pytest_cache .ruff_cache
