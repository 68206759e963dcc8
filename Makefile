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

# Bytecode: each command and test process imports dagster, torch's stack and ours. A machine that sets
# PYTHONDONTWRITEBYTECODE=1 (this one does) would compile those modules again in every new process (~2 s a CLI
# start, bench/README.md), so the recipes here let Python write its .pyc files. uv writes none at install, and
# compiling the whole venv there (--compile-bytecode) took 27 of setup's 41 s on 2 cores. So Python compiles what is
# imported, at its first import: setup loads the code location and a sqlite instance once (what every command
# loads), and the tests compile the rest of what they import as they go (pytest caches its rewritten test modules).
unexport PYTHONDONTWRITEBYTECODE
WARM_UP := import pathlib, tempfile, dagster, nemotron_assets.cli, nemotron_assets.definitions; \
	home = tempfile.TemporaryDirectory(); pathlib.Path(home.name, "dagster.yaml").touch(); \
	dagster.DagsterInstance.local_temp(home.name).dispose()

setup: $(BIN)/python
	$(BIN)/uv pip install --quiet --python $(BIN)/python \
		$(if $(FIND_LINKS),--find-links $(FIND_LINKS)) -e '.[test,cluster,lineage,scoring,sentences,export]'
	$(BIN)/python -m compileall -q nemotron_assets nemotron_assets_tests
	$(BIN)/python -c '$(WARM_UP)'

# Quick start 1: set up, then materialize the bundled sample blends (pretraining text, post-training rows, JSONL for
# RL and SFT) into ./data, with the sqlite instance in dagster_home/.
demo: setup
	$(BIN)/python -m nemotron_assets materialize sample
	$(BIN)/python -m nemotron_assets materialize posttrain_sample
	$(BIN)/python -m nemotron_assets materialize rl_sample
	@echo "Outputs: ./data/sample/, ./data/posttrain_sample/ and ./data/rl_sample/   UI: DAGSTER_HOME=$(DAGSTER_HOME) $(BIN)/dagster dev -w workspace.yaml"

# Quick start 2: set up, install Debian's chromium and PostgreSQL when missing (apt-get: root, or sudo without a
# password), lint, and run the whole test suite on two workers (pytest-xdist: each test has its own temp folders,
# instance and ports, so two run side by side; a worker that runs out of tests takes some of the other's).
test: setup
	bash .ci/install_system_deps.sh
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 2 --dist worksteal

ui: setup
	$(BIN)/dagster dev -w workspace.yaml

clean:
	rm -rf data dagster_home/storage dagster_home/history dagster_home/schedules dagster_home/logs
