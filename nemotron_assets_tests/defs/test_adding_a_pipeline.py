"""One registry line adds a pipeline: the definitions, ``status``, ``verify`` and the command line all see it, and no
shared module changes (nemotron_assets_tests/defs/toy_pipeline.py)."""

import json
import subprocess
import sys

import dagster as dg

from nemotron_assets.definitions import build_definitions
from nemotron_assets.defs.registry import PIPELINES
from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.defs.toy_pipeline import TOY, register

WITH_TOY = ("import nemotron_assets_tests.defs.toy_pipeline as toy; toy.register(); "
            "from nemotron_assets.cli import run; run()")


def _command(args: list[str], env: dict) -> subprocess.CompletedProcess:
    """``python -m nemotron_assets ARGS`` with the toy pipeline registered first."""
    return subprocess.run([sys.executable, "-c", WITH_TOY, *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_a_registered_pipeline_shows_in_the_definitions(sample_blends, tmp_path, monkeypatch):
    monkeypatch.setattr("nemotron_assets.defs.registry.PIPELINES", PIPELINES)  # restored after the test
    register()
    try:
        defs = build_definitions(blends_dir=sample_blends, data_root=str(tmp_path / "data"))
    finally:
        PIPELINES.remove(TOY)
    graph = defs.get_repository_def().asset_graph
    for key in (dg.AssetKey(["sample", "toy_count"]), dg.AssetKey(["sample", "samples", "toy_count"])):
        assert key in graph.get_all_asset_keys()
    assert graph.get(dg.AssetKey(["sample", "toy_count"])).parent_keys == {dg.AssetKey(["sample", "source_split"])}


def _toy_state(env: dict) -> str:
    status = _command(["status", "sample", "--json"], env)
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)["blends"][0]
    assert "Toy counts" in [section["title"] for section in report["sections"]]
    return next(output["state"] for output in report["outputs"] if output["asset"] == "toy_count")


def test_a_registered_pipeline_runs_from_the_command_line_and_shows_in_status_and_verify(cli_env):
    assert _toy_state(cli_env) == "missing"
    verify = _command(["verify", "sample"], cli_env)
    assert verify.returncode == 1
    assert "toy/count.txt: does not exist: materialize sample/toy_count" in verify.stdout + verify.stderr

    done = _command(["materialize", "sample"], cli_env)
    assert done.returncode == 0, done.stderr
    assert "toy_count" in done.stdout + done.stderr
    assert _toy_state(cli_env) == "done"
    verify = _command(["verify", "sample"], cli_env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
