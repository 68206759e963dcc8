# The two commands of the README quick start, plus helpers. Needs only python3.11 and a package registry.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
export DAGSTER_HOME := $(CURDIR)/dagster_home

.PHONY: setup demo test lint ui clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv

# uv does not read pip's configuration: a find-links folder pip is configured with (here it holds the CPU build of
# torch) is passed on, or uv would fetch the newest torch with several GB of CUDA packages.
FIND_LINKS := $(shell $(PYTHON) -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$$/\1/p" | head -1)

# Bytecode: every command and test process imports dagster, torch's stack and ours. uv writes no .pyc files at
# install (pip does), so --compile-bytecode compiles the venv once; without it each new process on a machine that sets
# PYTHONDONTWRITEBYTECODE=1 (this one does) compiles them again (~2 s a CLI start, bench/README.md). Compiling only
# what is imported, at first import, saved 27 s of setup but cost the test run as much. The recipes here let Python
# and pytest write their caches: pytest keeps its rewritten test modules (collection 14.6 s -> 9.2 s on a rerun).
unexport PYTHONDONTWRITEBYTECODE
setup: $(BIN)/python
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python \
		$(if $(FIND_LINKS),--find-links $(FIND_LINKS)) -e '.[test,cluster,lineage,scoring,sentences,export]'
	$(BIN)/python -m compileall -q nemotron_assets nemotron_assets_tests

# Quick start 1: set up, then materialize the bundled sample blends (pretraining text, post-training rows, JSONL for
# RL and SFT) into ./data, with the sqlite instance in dagster_home/.
demo: setup
	$(BIN)/python -m nemotron_assets materialize sample
	$(BIN)/python -m nemotron_assets materialize posttrain_sample
	$(BIN)/python -m nemotron_assets materialize rl_sample
	@echo "Outputs: ./data/sample/, ./data/posttrain_sample/ and ./data/rl_sample/   UI: DAGSTER_HOME=$(DAGSTER_HOME) $(BIN)/dagster dev -w workspace.yaml"

# Quick start 2: set up, install Debian's chromium and PostgreSQL when missing (apt-get: root, or sudo without a
# password), lint, and run the whole test suite on three workers (pytest-xdist: each test has its own temp folders,
# instance and ports, so they run side by side; a worker that runs out of tests takes some of another's). Three on two
# cores: the end-to-end tests spend much of their time waiting on a webserver, a daemon, a Ray head or the command
# line, and a third worker fills those waits (bench/README.md, "The test suite's time").
test: setup
	bash .ci/install_system_deps.sh
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 3 --dist worksteal

ui: setup
	$(BIN)/dagster dev -w workspace.yaml

clean:
	rm -rf data dagster_home/storage dagster_home/history dagster_home/schedules dagster_home/logs
