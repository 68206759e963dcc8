"""The bundled sample blends built once per test process by the command line (run in the test process), for the
tests that read the output tree as its consumers do (test_trainers_read_the_output_folders.py) and the test that moves
a tree written before the hidden folders (test_an_old_output_tree_is_moved_not_rebuilt.py)."""

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from nemotron_assets_tests.commands import command_here
from nemotron_assets_tests.conftest import REPO

BLENDS = ("sample", "posttrain_sample", "rl_sample")  # pretraining, Harmony + pools + packed SFT, JSONL


@dataclass(frozen=True)
class SampleOutputs:
    env: dict[str, str]  # the environment of a command on this tree (DAGSTER_HOME, NEMOTRON_DATA_ROOT, ...)
    data: Path  # the storage root

    def run(self, *args: str) -> subprocess.CompletedProcess:
        """``python -m nemotron_assets <args>`` on this tree, in a process of its own."""
        return subprocess.run([sys.executable, "-m", "nemotron_assets", *args], env=self.env, cwd=REPO,
                              capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def sample_outputs(tmp_path_factory) -> SampleOutputs:
    """Every bundled sample blend materialized by the command line into one fresh root. A test that changes the tree
    leaves it as the build left it (the upgrade test moves its receipts back and has the next build move them)."""
    root = tmp_path_factory.mktemp("sample_outputs")
    home = root / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = dict(os.environ, DAGSTER_HOME=str(home), NEMOTRON_DATA_ROOT=str(root / "data"),
               NEMOTRON_BLENDS_DIR=str(REPO / "blends"), HF_HUB_OFFLINE="1")
    outputs = SampleOutputs(env, root / "data")
    for blend in BLENDS:  # the command line, in this process (the tests that use the tree run theirs in processes)
        code, _, err = command_here(env, "materialize", blend)
        assert code == 0, err[-3000:]
    return outputs
