"""The bundled post-training and RL sample blends materialized once (per test process) through the command line, for
the export and push tests; each test writes its exports into its own folder, and a test that edits a blend file puts
it back."""

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from nemotron_assets_tests.commands import command_here
from nemotron_assets_tests.conftest import REPO

BLENDS = ("posttrain_sample", "rl_sample")


@dataclass(frozen=True)
class Built:
    env: dict
    root: Path  # NEMOTRON_DATA_ROOT
    blends: Path  # NEMOTRON_BLENDS_DIR: a copy of blends/ a test may change

    def run(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "nemotron_assets", *args], env=env or self.env, cwd=REPO,
                              capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Built:
    base = tmp_path_factory.mktemp("export")
    home = base / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    shutil.copytree(REPO / "blends", base / "blends")
    env = dict(os.environ, DAGSTER_HOME=str(home), NEMOTRON_DATA_ROOT=str(base / "data"),
               NEMOTRON_BLENDS_DIR=str(base / "blends"), HF_HUB_OFFLINE="1", HF_HOME=str(base / "hf_home"),
               HF_DATASETS_CACHE=str(base / "hf_datasets_cache"))
    ready = Built(env, base / "data", base / "blends")
    for blend in BLENDS:  # the command line, in this process; the tests run theirs in processes of their own
        code, _, err = command_here(env, "materialize", blend)
        assert code == 0, err[-3000:]
    return ready
