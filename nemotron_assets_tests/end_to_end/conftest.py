"""The bundled sample blends built once per test process by the command line (run in the test process), for the
tests that read the output tree as its consumers do (test_trainers_read_the_output_folders.py), the test that moves
a tree written before the hidden folders (test_an_old_output_tree_is_moved_not_rebuilt.py), and the reference build
that builds in other processes must equal byte for byte (test_samples_and_determinism.py)."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
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
    built: dict[str, bytes]  # the tree as the build left it (`tree_bytes`): tests may change it afterwards
    logs: dict[str, str]  # each blend's build: what the command printed (stdout and stderr)

    @contextlib.contextmanager
    def data_path_lent(self) -> Iterator[Path]:
        """The tree moved aside for the ``with`` block, so another build can write at the same path (blend.json and
        its receipt hold the root's path): the caller moves its build away before the block ends."""
        aside = self.data.with_name("data_lent")
        self.data.rename(aside)
        try:
            yield self.data
        finally:
            shutil.rmtree(self.data, ignore_errors=True)
            aside.rename(self.data)

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
    logs = {}
    for blend in BLENDS:  # the command line, in this process (the tests that use the tree run theirs in processes)
        code, out, err = command_here(env, "materialize", blend)
        assert code == 0, err[-3000:]
        logs[blend] = out + err
    return SampleOutputs(env, root / "data", tree_bytes(root / "data"), logs)


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under ``root``; receipts (of shards, duplicates, pools, views and reports) without their commit
    stamps (file times and ETags, which differ between any two builds by nature)."""
    files = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if path.suffix == ".json":
            body = json.loads(data)
            if isinstance(body, dict) and "receipt_version" in body:  # a receipt: shard, pool, view or report
                body.pop("committed")
                data = json.dumps(body, sort_keys=True).encode()
        files[str(path.relative_to(root))] = data
    return files
