"""Launching real Dagster runs of the blend assets, the way ``dagster asset materialize`` does.

Each run is executed against the instance in ``DAGSTER_HOME`` through a reconstructable job that points at
``nemotron_assets.definitions``, so runs show in the UI of ``dagster dev -w workspace.yaml`` and can be
re-executed from there. A set of partitions becomes runs of contiguous partition-key ranges.

Independent runs (the shard ranges of one step) can run at the same time: a ``WorkerPool`` hands them to up to
``workers`` worker processes, forked from a server that has the code location imported already, each executing
one run at a time against the same instance; the CLI keeps one pool for all the steps of a command. One process
per run, not threads, because normalizing rows is Python code that holds the GIL. The outputs are the same bytes
as one run after the other: each shard's bytes depend on its inputs only.
"""

import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
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


def split_into_runs(keys: Sequence[str], jobs: int, max_per_run: int) -> Iterator[list[str]]:
    """Contiguous runs of ``keys``, at most ``max_per_run`` each and, when there are enough keys, at least ``jobs``
    of them, so every worker gets work."""
    per_run = max(1, min(max_per_run, math.ceil(len(keys) / max(jobs, 1))))
    for start in range(0, len(keys), per_run):
        yield list(keys[start:start + per_run])


class WorkerPool:
    """Up to ``workers`` worker processes, forked from a server that has the code location imported, each executing
    one run at a time against the instance of ``DAGSTER_HOME``; kept for a whole command, so a step after the first
    finds them started (``start``: begin starting them now, e.g. while the source split runs in this process).

    A worker gets its repository and instance once (``_start_worker``), then takes the next run as soon as it is
    free: runs of uneven cost share the workers as they end."""

    def __init__(self, workers: int) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([DEFINITIONS_MODULE])
        self.workers = workers
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_start_worker)
        self._started = False

    def start(self) -> None:
        """Start every worker now (each loads the repository); returns at once."""
        if not self._started:
            self._started = True
            for _ in range(self.workers):  # a task per worker: the pool starts a process for each one waiting
                self._pool.submit(_ready)

    def execute(self, asset_key: dg.AssetKey, partition_runs: list[list[str] | None], run_config: dict, tags: dict,
                on_finished: Callable[[RunOutcome], None]) -> list[RunOutcome]:
        """Every run of ``partition_runs`` on the workers; outcomes in the given order."""
        self.start()
        outcomes: dict[int, RunOutcome] = {}
        futures = {self._pool.submit(_run_in_worker, asset_key.path, partitions, run_config, tags): number
                   for number, partitions in enumerate(partition_runs)}
        for future in as_completed(futures):
            number = futures[future]
            try:
                outcome = future.result()
            except Exception as exc:  # noqa: BLE001 - the worker died or could not start the run: say so, go on
                outcome = RunOutcome("(no run)", False, tuple(partition_runs[number] or ()),
                                     f"the worker process failed before the run ended: {type(exc).__name__}: {exc}")
            outcomes[number] = outcome
            on_finished(outcome)
        return [outcomes[number] for number in range(len(partition_runs))]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


_WORKER: dict = {}  # per worker process: the repository origin, its definition and the instance


def _start_worker() -> None:
    """A worker's own repository definition and instance, made once when it starts."""
    if not _WORKER:
        _WORKER["origin"], _WORKER["repo"] = load_repository()
        _WORKER["instance"] = dg.DagsterInstance.get()


def _ready() -> None:
    """Nothing: submitted once per worker so the pool starts them all (``WorkerPool.start``)."""


def _run_in_worker(asset_path: list[str], partitions: list[str] | None, run_config: dict, tags: dict) -> RunOutcome:
    from nemotron_assets.core.instance import PROCESS_TAG
    from nemotron_assets.core.processes import owner_token

    _start_worker()
    return execute_assets(_WORKER["origin"], _WORKER["repo"], _WORKER["instance"], [dg.AssetKey(asset_path)],
                          partitions, run_config, {**tags, PROCESS_TAG: owner_token()})
