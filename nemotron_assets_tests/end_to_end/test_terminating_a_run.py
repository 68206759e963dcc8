"""A run terminated from the UI stops: a real ``dagster-webserver`` and ``dagster-daemon``, the GraphQL mutations
the UI's launchpad and its Terminate button send. The builds in progress are killed and their staging removed, the
shards already committed stay done, the run ends CANCELED within 5 s, and a re-run completes and verifies."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.end_to_end.ui_helpers import dagster_ui
from nemotron_assets_tests.process_helpers import wait_for

pytestmark = pytest.mark.slow

LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) { __typename
    ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
TERMINATE = """mutation($id: String!) { terminateRun(runId: $id) { __typename
    ... on TerminateRunFailure { message } ... on PythonError { message } } }"""


def test_a_run_terminated_from_the_ui_stops_its_builds_and_ends_canceled(tmp_path, cli_env):
    blends = tmp_path / "blends"
    blends.mkdir()
    text = (REPO / "blends" / "sample_data" / "wiki" / "part-00000.jsonl").read_text()
    (blends / "big.jsonl").write_text(text * 560)  # 4 shards of ~9 MB: seconds each with the hf backend
    (blends / "big.yaml").write_text("shard_size: 9MB\ndatasets:\n  - {name: big, path: big.jsonl}\n")
    env = dict(cli_env, NEMOTRON_BLENDS_DIR=str(blends))
    data = Path(env["NEMOTRON_DATA_ROOT"])
    split = subprocess.run([sys.executable, "-m", "nemotron_assets", "materialize", "big", "--select", "source_split"],
                           env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert split.returncode == 0, split.stderr[-3000:]

    with dagster_ui(REPO, env, tmp_path) as ui:
        params = {
            "selector": {"repositoryLocationName": "nemotron_assets.definitions", "repositoryName": "__repository__",
                         "jobName": "__ASSET_JOB", "assetSelection": [{"path": ["big", "pretrain_shard"]}],
                         "assetCheckSelection": []},
            "runConfigData": {"ops": {"big__pretrain_shard": {"config": {"tokenizer_backend": "hf"}}}},
            "executionMetadata": {"tags": [{"key": "dagster/asset_partition_range_start", "value": "big/shard_00000"},
                                           {"key": "dagster/asset_partition_range_end", "value": "big/shard_00003"}]},
        }
        launched = ui.graphql(LAUNCH, {"params": params})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]
        receipts = data / "big" / "pretrain" / "big" / ".receipts"
        deadline = time.monotonic() + 180
        while not ((receipts / "shard_00000.json").exists() and list((data / ".staging").glob("*/shard.bin"))):
            assert time.monotonic() < deadline, f"no second build started: {ui.run_status(run_id)}\n{ui.log_tails()}"
            time.sleep(0.05)

        asked = time.monotonic()
        assert ui.graphql(TERMINATE, {"id": run_id})["terminateRun"]["__typename"] == "TerminateRunSuccess"
        status = ui.wait_for_run(run_id, timeout=30)
        stopped_after = time.monotonic() - asked
        assert status == "CANCELED", ui.log_tails()
        assert stopped_after < 5, f"the run ended {stopped_after:.1f} s after the termination request"
        # The killed builds' staging is gone once the step has unwound. Dagster may record the run CANCELED while the
        # interrupt is still being handled (when it landed in Dagster's own code between two events of the step),
        # and the step's cleanup runs as that exception is released, moments later.
        wait_for(lambda: not list((data / ".staging").iterdir()), "the killed builds' staging to be removed", 10)
        assert (receipts / "shard_00000.json").exists()  # committed before the request: still done
        assert not (receipts / "shard_00003.json").exists()
        assert "Execution of step \"big__pretrain_shard\" failed." in ui.run_messages(run_id)

    again = subprocess.run([sys.executable, "-m", "nemotron_assets", "materialize", "big"], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "big/shard_00000: up to date" in again.stderr
    verify = subprocess.run([sys.executable, "-m", "nemotron_assets", "verify", "big"], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert verify.returncode == 0, verify.stdout[-3000:]
