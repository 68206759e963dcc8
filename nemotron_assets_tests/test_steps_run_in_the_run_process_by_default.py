"""The code location's executor runs a run's steps in the run's own process unless the run config says otherwise
(a shard step builds its shards in parallel itself: a process per step would only add its start-up).

Each case runs a real job on a real sqlite instance; the step reports its process and its parent, read from /proc: a
spawned step's parent is the run process (here the test process itself, since ``execute_job`` orchestrates
in-process).
"""

import os
from pathlib import Path

import dagster as dg
import pytest

from nemotron_assets.definitions import executor


@dg.asset
def step_parent() -> dg.MaterializeResult:
    parent = os.getppid()
    command_line = Path(f"/proc/{parent}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return dg.MaterializeResult(metadata={"parent_pid": parent, "parent_command_line": command_line,
                                          "step_pid": os.getpid()})


def probe_job() -> dg.JobDefinition:
    defs = dg.Definitions(assets=[step_parent], jobs=[dg.define_asset_job("probe", [step_parent])],
                          executor=executor)
    return defs.resolve_job_def("probe")


def _step_metadata(tmp_path: Path, execution: dict | None) -> dict:
    run_config = {"execution": {"config": execution}} if execution is not None else {}
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        with dg.execute_job(dg.reconstructable(probe_job), instance=instance, run_config=run_config) as result:
            assert result.success
            [materialization] = result.asset_materializations_for_node("step_parent")
    return {key: value.value for key, value in materialization.metadata.items()}


def test_steps_run_in_the_run_process_by_default(tmp_path):
    metadata = _step_metadata(tmp_path, None)
    assert metadata["step_pid"] == os.getpid()


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
def test_run_config_can_choose_a_process_per_step(tmp_path):
    metadata = _step_metadata(tmp_path, {"multiprocess": {"start_method": {"spawn": {}}}})
    assert metadata["step_pid"] != os.getpid() and metadata["parent_pid"] == os.getpid()
