# The two commands of the README quick start, plus helpers. Needs only python3.11 and a package registry.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
export DAGSTER_HOME := $(CURDIR)/dagster_home

.PHONY: setup demo test lint ui clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv

# uv does not read pip's configuration: a find-links folder pip is configured with (here it holds the CPU build of
# torch) is passed on, or uv would fetch the newest torch with several GB of CUDA packages.
FIND_LINKS := $(shell $(PYTHON) -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$$/\1/p" | head -1)

# --compile-bytecode: every command and test process imports dagster, torch's stack and ours; uv skips writing .pyc
# files (pip writes them), so without it each new process compiles them again (~2 s a CLI start, bench/README.md).
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
# password), lint, and run the whole test suite on two workers (pytest-xdist: each test has its own temp folders,
# instance and ports, so two run side by side; a worker that runs out of tests takes some of the other's).
# The tests' temporary files go to a memory-backed folder when /dev/shm has TEST_TMP_MIN_KB free: the suite writes
# about 1 GB and commits thousands of sqlite transactions (Dagster's event log), each one synced to disk; on the
# 2-core VM that was a quarter of a test file's time (bench/README.md). The folder is removed after the run.
TEST_TMP_MIN_KB := 4194304
SHM_ROOM := $(shell df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 && $$4 > $(TEST_TMP_MIN_KB) {print "yes"}')
test: setup
	bash .ci/install_system_deps.sh
	$(BIN)/ruff check .
	$(if $(SHM_ROOM),export TMPDIR=$$(mktemp -d /dev/shm/ntXXXX); trap 'rm -rf "$$TMPDIR"' EXIT INT TERM;) \
		$(BIN)/python -m pytest -q -n 2 --dist worksteal

ui: setup
	$(BIN)/dagster dev -w workspace.yaml

clean:
	rm -rf data dagster_home/storage dagster_home/history dagster_home/schedules dagster_home/logs
