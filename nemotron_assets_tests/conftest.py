"""Shared fixtures: a real Dagster instance (sqlite in a temp folder) and helpers that materialize a blend
the way a backfill does (partition-range runs), without going through the CLI."""

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing in the tests may reach a hub

# No time limit per example: on a busy 2-core machine a first example that imports a module can take 500 ms, and
# speed is measured in bench/, never in tests.
settings.register_profile("no_deadline", deadline=None)
settings.load_profile("no_deadline")

#: The test files whose tests share a costly build: a session or module fixture that materializes blends (the export
#: tests' two blends, the end-to-end tests' three, the scoring blend, the status tests' tree). They run first.
SHARED_BUILDS = tuple(f"nemotron_assets_tests/{path}" for path in (
    "defs/export/", "end_to_end/test_an_old_output_tree_is_moved_not_rebuilt.py",
    "end_to_end/test_trainers_read_the_output_folders.py", "end_to_end/test_samples_and_determinism.py",
    "defs/scoring/test_scoring_steps.py", "cli/test_status_and_verify.py", "cli/test_verify_harmony.py"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of `SHARED_BUILDS` first, each file's in their order, then the others in theirs.

    ``pytest -n 3 --dist worksteal`` gives each worker a third of this order, and a worker that runs out takes the
    end of another worker's queue. A file split that way builds its fixture again on every worker that runs one of its
    tests: in one run, the export tests' two blends were built on all three workers, at the end of the run. At the
    front of the first worker's third, nothing takes them away."""
    items.sort(key=lambda item: not item.nodeid.startswith(SHARED_BUILDS))


#: The event log of an in-process test instance, kept in memory. Dagster's sqlite event log (what DAGSTER_HOME's
#: instance uses) opens a new database engine for every event and creates and stamps a database file for every run:
#: ~4 ms an event and ~0.25 s a small run, about a sixth of the suite's CPU time when every in-process test used it.
#: Runs and schedules stay in sqlite. A test whose runs write events from other processes (the multiprocess executor,
#: the command line, the UI) uses a DAGSTER_HOME instance, as a user does.
IN_MEMORY_EVENTS = {"event_log_storage": {"module": "dagster._core.storage.event_log",
                                          "class": "InMemoryEventLogStorage"}}


def quick_instance():
    """A real Dagster instance in a temporary folder, its event log in memory (``IN_MEMORY_EVENTS``)."""
    import dagster as dg

    return dg.instance_for_test(overrides=IN_MEMORY_EVENTS)


@pytest.fixture
def instance():
    with quick_instance() as test_instance:
        yield test_instance


@pytest.fixture
def sample_blends(tmp_path) -> Path:
    """A copy of the bundled blends folder (sample blend + its data) that a test may modify."""
    target = tmp_path / "blends"
    shutil.copytree(REPO / "blends", target)
    return target


def set_up_deployment(place: Path, patch: pytest.MonkeyPatch) -> None:
    """A fresh instance in ``place/dagster_home`` (the bundled dagster.yaml), data root ``place/data`` and blends
    folder ``place/blends`` (the caller's), as this process's environment."""
    home = place / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    patch.setenv("DAGSTER_HOME", str(home))
    patch.setenv("NEMOTRON_DATA_ROOT", str(place / "data"))
    patch.setenv("NEMOTRON_BLENDS_DIR", str(place / "blends"))


@pytest.fixture
def deployment(tmp_path, sample_blends, monkeypatch) -> Path:
    """A fresh instance (the bundled dagster.yaml), data root ``tmp_path/data`` and copy of the bundled blends, as
    this process's environment; returns ``tmp_path``."""
    set_up_deployment(tmp_path, monkeypatch)
    return tmp_path


@pytest.fixture
def cli_env(tmp_path):
    """The environment of a command in a fresh instance (the bundled dagster.yaml) writing under tmp_path."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = dict(os.environ, DAGSTER_HOME=str(home), NEMOTRON_DATA_ROOT=str(tmp_path / "data"),
               NEMOTRON_BLENDS_DIR=str(REPO / "blends"), HF_HUB_OFFLINE="1")
    return env
