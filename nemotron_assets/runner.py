"""Launching real Dagster runs of the blend assets, the way ``dagster asset materialize`` does.

Each run is executed against the instance in ``DAGSTER_HOME`` through a reconstructable job that points at
``nemotron_assets.definitions``, so runs show in the UI of ``dagster dev -w workspace.yaml`` and can be
re-executed from there. A set of partitions becomes runs of contiguous partition-key ranges of at most
``max_per_run`` keys (one run per shard would cost seconds of overhead each).
"""

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import dagster as dg

# Private imports, because Dagster 1.13 has no public API for them: a reconstructable job that points at the code
# location by module (so the UI re-executes our runs like its own) is built from these origins, and the
# partition-range tags are what `dagster asset materialize --partition-range` sets.
from dagster._core.code_pointer import CodePointer
from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from dagster._utils.hosted_user_process import recon_job_from_origin, recon_repository_from_origin

DEFINITIONS_MODULE = "nemotron_assets.definitions"


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    success: bool
    partitions: tuple[str, ...]
    error: str = ""  # the located error of the first failed step (all its failed partitions), else ""
    seconds: float = 0.0
    asset: str = ""

    def for_asset(self, asset: str) -> "RunOutcome":
        return replace(self, asset=asset)


def repository_origin() -> RepositoryPythonOrigin:
    pointer = CodePointer.from_module(DEFINITIONS_MODULE, "defs", working_directory=os.getcwd())
    return RepositoryPythonOrigin(executable_path=sys.executable, code_pointer=pointer)


def load_repository() -> tuple[RepositoryPythonOrigin, dg.RepositoryDefinition]:
    origin = repository_origin()
    return origin, recon_repository_from_origin(origin).get_definition()


def execute_assets(origin: RepositoryPythonOrigin, repo: dg.RepositoryDefinition, instance: dg.DagsterInstance,
                   asset_keys: Sequence[dg.AssetKey], partitions: Sequence[str] | None, run_config: dict,
                   tags: dict | None = None) -> RunOutcome:
    """One run materializing ``asset_keys`` for a contiguous partition range (or unpartitioned)."""
    job_def = repo.get_implicit_job_def_for_assets(list(asset_keys))
    if job_def is None:
        raise ValueError(f"assets {asset_keys} cannot run together (different partitions)")
    job = recon_job_from_origin(JobPythonOrigin(job_def.name, repository_origin=origin))
    run_tags = dict(tags or {})
    if partitions:
        run_tags[ASSET_PARTITION_RANGE_START_TAG] = partitions[0]
        run_tags[ASSET_PARTITION_RANGE_END_TAG] = partitions[-1]
    started = time.monotonic()
    with dg.execute_job(job, instance, run_config=run_config, tags=run_tags,
                        asset_selection=list(asset_keys)) as result:
        error = "" if result.success else first_error(result.all_events)
        return RunOutcome(result.run_id, result.success, tuple(partitions or ()), error,
                          time.monotonic() - started)


def first_error(events) -> str:
    """The first step failure's message (our own ``Failure`` text without its class path), else the run failure's."""
    for event in events:
        if event.is_step_failure and event.step_failure_data.error is not None:
            error = event.step_failure_data.error
            while error.cause is not None and error.cls_name in ("DagsterExecutionStepExecutionError",):
                error = error.cause
            message = error.message.strip()
            if error.cls_name == "Failure":  # our own located message; the class path adds nothing
                message = message.split(": ", 1)[-1]
            return f"{event.step_key}: {message}"
        if event.is_run_failure and event.message:
            return event.message
    return "the run failed (see the run's logs in the Dagster UI)"
