"""Real Dagster runs of a blend's assets, the way ``dagster asset materialize`` and the UI make them.

A run materializes one asset for a contiguous range of its partitions (or unpartitioned), against the instance of
``DAGSTER_HOME``, through a job that points at the code location by module (``nemotron_assets.definitions``), so
the runs show in the UI of ``dagster dev -w workspace.yaml`` and can be re-executed from there. A range is given to
Dagster by two tags (core/partitions.py `range_tags`), as ``--partition-range`` does.

Two ways to run them:

- **here** (`execute_assets`): the run executes in this process and returns when it ends (the command line, and
  the tests); the command line gives it an instance made for a terminal (`terminal_instance`);
- **launched** (`launch_assets`, then `wait_for_runs`): the run is handed to the instance's run launcher (Ray,
  through dagster-ray, in the cluster deployment) and polled until it ends, asking the launcher about the health of
  its worker, so a run whose worker died is failed instead of waited on forever.

Where a run's events and output go: the sqlite instance of ``dagster_home/`` records events through
`KeptOpenSqliteEventLogStorage`, and captures a step's output through `MirroredComputeLogManager` (both named in its
``dagster.yaml``, so every process of the instance uses them): Dagster's own files, with connections kept open
instead of opened and closed for every event, and the output copied back to the process by a thread instead of four
helper processes per run.

This module and core/reporting.py are the only ones that use Dagster's private API, each import saying why.
"""

import contextlib
import importlib
import logging
import os
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import dagster as dg

# Private imports, because Dagster 1.13 has no public API for them:
# - CodePointer, recon_job_from_origin, recon_repository_from_origin: a job reconstructable from the code location's
#   module (so the UI re-executes our runs like its own); ReconstructableJob, whose cached definition a process
#   that materializes twice must drop (`reload_definitions`);
# - the origins, SINGLETON_REPOSITORY_NAME, WorkerStatus: creating a run for the code location and handing it to the
#   instance's launcher, as the webserver does, and the launcher's report on the run's worker;
# - InstanceRef, ConfigurableClassData: the instance of a terminal (`terminal_instance`), DAGSTER_HOME's
#   configuration as Dagster reads it with two settings changed, one of them its compute log manager;
# - LocalComputeLogManager, IO_TYPE_EXTENSION, ComputeIOType, CapturedLogContext, redirect_to_file: Dagster's local
#   compute logs, which `MirroredComputeLogManager` extends (its capture, the one part it changes, has no public parts);
# - SqliteEventLogStorage, INDEX_SHARD_NAME, SQLITE_BUSY_TIMEOUT_SECONDS: Dagster's sqlite event log, which
#   `KeptOpenSqliteEventLogStorage` extends (the one way to change how it connects is its private ``_connect``).
from dagster._core.code_pointer import CodePointer
from dagster._core.definitions.reconstruct import ReconstructableJob
from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
from dagster._core.execution.compute_logs import redirect_to_file
from dagster._core.instance.ref import InstanceRef
from dagster._core.launcher.base import WorkerStatus
from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
from dagster._core.remote_origin import (
    ManagedGrpcPythonEnvCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.storage.compute_log_manager import CapturedLogContext, ComputeIOType
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    INDEX_SHARD_NAME,
    SQLITE_BUSY_TIMEOUT_SECONDS,
    SqliteEventLogStorage,
)
from dagster._core.storage.local_compute_log_manager import IO_TYPE_EXTENSION, LocalComputeLogManager
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._serdes import ConfigurableClassData
from dagster._utils.hosted_user_process import recon_job_from_origin, recon_repository_from_origin
from sqlalchemy import Engine, create_engine

from nemotron_assets.core.allocator import refreeze_after_reload
from nemotron_assets.core.partitions import range_tags

DEFINITIONS_MODULE = "nemotron_assets.definitions"
HEALTH_CHECK_SECONDS = 10.0


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    success: bool
    partitions: tuple[str, ...]
    error: str = ""  # the located error of the first failed step (all its failed partitions), else ""
    seconds: float = 0.0  # the run's, from its start to its end
    asset: str = ""
    step_seconds: float = 0.0  # of which its steps' own work (Dagster's STEP_SUCCESS durations)

    def for_asset(self, asset: str) -> "RunOutcome":
        return replace(self, asset=asset)


def repository_origin() -> RepositoryPythonOrigin:
    pointer = CodePointer.from_module(DEFINITIONS_MODULE, "defs", working_directory=os.getcwd())
    return RepositoryPythonOrigin(executable_path=sys.executable, code_pointer=pointer)


def load_repository() -> tuple[RepositoryPythonOrigin, dg.RepositoryDefinition]:
    origin = repository_origin()
    return origin, recon_repository_from_origin(origin).get_definition()


def reload_definitions() -> None:
    """Make the next `load_repository` and the next run load the code location as the blend files and settings are
    now. A process imports ``nemotron_assets.definitions`` once, and Dagster keeps the last job definition it
    reconstructed from it; a process that materializes more than once (the Python API, or the command's ``main``
    called twice) would otherwise build a blend edited since the first time, or from another blends folder, with the
    first time's assets, settings and data root. The command calls it before every build (cli/materialize.py); in a
    fresh process it does nothing."""
    module = sys.modules.get(DEFINITIONS_MODULE)
    if module is None:
        return  # the first load imports it as it is now
    importlib.reload(module)
    ReconstructableJob.get_repository_definition.cache_clear()
    ReconstructableJob.get_definition.cache_clear()
    refreeze_after_reload()


def _job(repo: dg.RepositoryDefinition, asset_keys: Sequence[dg.AssetKey]) -> dg.JobDefinition:
    job_def = repo.get_implicit_job_def_for_assets(list(asset_keys))
    if job_def is None:
        raise ValueError(f"assets {asset_keys} cannot run together (different partitions)")
    return job_def


# --- here ---------------------------------------------------------------------------------------------------
def terminal_instance(home: Path, console_level: str) -> dg.DagsterInstance:
    """The instance of ``home`` for runs executed in this process, whose console is a terminal showing messages
    from ``console_level`` up. Two of its settings differ from ``dagster.yaml``, in this process only (the UI,
    the daemon and launched runs read the file):

    - **Python log level** (``python_logs.python_log_level``): DEBUG when the console shows DEBUG, else INFO. A
      step process of the multiprocess executor logs its start (``STEP_WORKER_STARTED``) before it has the
      run's loggers, through Dagster's own console logger at this level (DEBUG when unset), so the event would
      reach the terminal in Dagster's long format under our compact lines. Events are recorded whatever the
      level; a step's ``context.log.debug`` messages are recorded only at DEBUG (the steps log none).
    - **Compute logs**: when the file names Dagster's own local compute log manager, `MirroredComputeLogManager`:
      the same files, copied to the terminal without helper processes (Dagster's received the terminal's Ctrl-C:
      each printed a ``KeyboardInterrupt`` traceback, and the killed copies lost the run's last lines).
    """
    ref = InstanceRef.from_dir(str(home))
    python_logs = {**(ref.settings.get("python_logs") or {}),
                   "python_log_level": "DEBUG" if _level(console_level) <= logging.DEBUG else "INFO"}
    changes: dict = {"settings": {**ref.settings, "python_logs": python_logs}}
    logs = ref.compute_logs_data
    if (logs.module_name, logs.class_name) == (LocalComputeLogManager.__module__, LocalComputeLogManager.__name__):
        changes["compute_logs_data"] = ConfigurableClassData(__name__, MirroredComputeLogManager.__name__,
                                                             logs.config_yaml)
    # The step processes of the multiprocess executor open the instance from this ref: they get the same settings.
    return dg.DagsterInstance.from_ref(ref._replace(**changes))


def _level(name: str) -> int:
    level = logging.getLevelName(name.upper())
    return level if isinstance(level, int) else logging.INFO


class PlacedInInstanceFolder:
    """For a Dagster storage class named in ``dagster.yaml`` without a ``base_dir``: the config cannot say
    "``$DAGSTER_HOME``/history/runs", so the files go where Dagster's default puts them (``FOLDER`` under the
    instance's folder), known when the instance registers the storage, its first act with it. Not from
    ``DAGSTER_HOME``: an instance opened by its folder (``DagsterInstance.from_config``) may be another one."""

    FOLDER: tuple[str, ...] = ()

    def __init__(self, base_dir: str | None = None, *rest) -> None:
        self._rest = rest  # the storage's own arguments after base_dir
        self._placed = base_dir is not None
        if self._placed:
            super().__init__(base_dir, *rest)

    def register_instance(self, instance: dg.DagsterInstance) -> None:
        if not self._placed:
            super().__init__(os.path.join(instance.root_directory, *self.FOLDER), *self._rest)
            self._placed = True
        super().register_instance(instance)


class MirroredComputeLogManager(PlacedInInstanceFolder, LocalComputeLogManager):
    """Dagster's local compute log manager (the same files under ``storage/``, the same reading for the UI), whose
    copy of a run's output to the process's own stdout and stderr is a thread instead of four processes.

    While a step executes, Dagster points the process's stdout and stderr (file descriptors 1 and 2, so a library's
    and a forked build's output too) at two files, for the UI. Its own manager also copies each file back to where the
    stream went, with a ``tail -F`` process and a Python watcher process that kills the tail if the run's process
    dies: four processes per run, 40 in an up-to-date ``materialize posttrain_sample``, which took 0.5-0.6 s of CPU
    and 0.25-0.8 s of its time (bench/README.md). Here `_mirrored` copies each file from a thread of the run's own
    process, which ends with it: nothing to watch, and nothing in the terminal's process group to receive its Ctrl-C.
    Every process of the instance uses it, because ``dagster.yaml`` names it; the command line also puts it in place
    of Dagster's own in an instance whose file names Dagster's (`terminal_instance`)."""

    FOLDER = ("storage",)

    def __init__(self, base_dir: str | None = None, polling_timeout: float | None = None,
                 inst_data: ConfigurableClassData | None = None) -> None:
        super().__init__(base_dir, polling_timeout, inst_data)

    @classmethod
    def config_type(cls):
        return {"base_dir": dg.Field(dg.StringSource, is_required=False),
                "polling_timeout": dg.Field(float, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "MirroredComputeLogManager":
        return cls(inst_data=inst_data, **config_value)

    @contextlib.contextmanager
    def capture_logs(self, log_key: Sequence[str]) -> Iterator[CapturedLogContext]:
        stdout = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[ComputeIOType.STDOUT])
        stderr = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[ComputeIOType.STDERR])
        with _mirrored(sys.stdout, stdout), _mirrored(sys.stderr, stderr):
            yield CapturedLogContext(log_key)
        Path(self.complete_artifact_path(log_key)).touch()  # the UI's sign that the capture is complete


MIRROR_POLL_SECONDS = 0.05  # how long a mirror waits for its file to grow before it looks again


@contextlib.contextmanager
def _mirrored(stream, path: str) -> Iterator[None]:
    """Inside, ``stream``'s file descriptor writes into ``path`` (appending), and a thread copies what the file holds
    and gains to where the stream went before. On leaving, the stream is put back and the thread copies the rest,
    then ends. A write to that destination that fails (a closed terminal) is dropped: the file keeps everything. A
    stream without a file descriptor (a notebook's) is neither captured nor copied, as in Dagster's own manager."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).touch()
    try:
        destination = os.dup(stream.fileno())
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both an OSError and a ValueError
        destination = None
    if destination is None:
        yield
        return
    finished = threading.Event()

    def copy() -> None:
        with open(path, "rb") as file:
            while True:
                chunk = file.read(1 << 16)
                if chunk:
                    with contextlib.suppress(OSError):
                        _write_all(destination, chunk)
                elif finished.is_set():
                    return
                else:
                    finished.wait(MIRROR_POLL_SECONDS)

    copier = threading.Thread(target=copy, name=f"mirror of {Path(path).name}", daemon=True)
    copier.start()
    try:
        with redirect_to_file(stream, path):
            yield
    finally:
        finished.set()
        copier.join()
        os.close(destination)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# --- where runs record their events ----------------------------------------------------------------------------
class KeptOpenSqliteEventLogStorage(PlacedInInstanceFolder, SqliteEventLogStorage):
    """Dagster's sqlite event log (the same files: ``history/runs/index.db`` and one ``<run id>.db`` per run, the same
    tables), with two costs of each write taken out. Every process that opens the instance uses it, because
    ``dagster.yaml`` names it: the command line, ``dagster asset materialize``, the UI, the daemon, run workers.

    - **Connections kept open.** Dagster's storage makes an engine, opens the file, writes, commits, closes and
      disposes for every event, and a run records ~40 (a step's start, each partition's planned and materialized
      events, each check, each log line): 8-11 ms an event, half of an up-to-date ``materialize posttrain_sample``. Here
      each file keeps one engine whose pool holds its connection open between writes, for the index and the last
      ``KEEP_OPEN`` run files (the UI reads many runs' files: the oldest engine is closed). A connection ends its
      transaction when it returns to the pool, so it holds no lock between writes, as sqlite's WAL mode needs for
      several processes sharing the files. A process forked from this one never uses or closes them: it opens its
      own.
    - **A new run's file copied, not created.** Dagster creates each run's file with its alembic migrations (~70 ms).
      Here the first new run's file of a process is created that way in a temporary folder, and each new run's file
      is written from its bytes: the same empty tables and migration stamp.
    """

    KEEP_OPEN = 4  # run files whose engine stays open, besides the index
    FOLDER = ("history", "runs", "")

    def __init__(self, base_dir: str | None = None, inst_data: ConfigurableClassData | None = None) -> None:
        self._engines: OrderedDict[str, Engine] = OrderedDict()  # shard -> its engine, the newest last
        self._engines_pid = os.getpid()
        self._inherited: list[OrderedDict[str, Engine]] = []  # a forked process's parent's engines, never used here
        self._empty_run_file: bytes | None = None  # a new run's file, made once per process
        super().__init__(base_dir, inst_data)

    @classmethod
    def config_type(cls):
        return {"base_dir": dg.Field(dg.StringSource, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "KeptOpenSqliteEventLogStorage":
        return cls(inst_data=inst_data, **config_value)

    @contextlib.contextmanager
    def _connect(self, shard: str) -> Iterator:
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)  # as Dagster's `_connect` does
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _engine(self, shard: str) -> Engine:
        if self._engines_pid != os.getpid():  # forked: the parent's connections are the parent's to use and close
            self._inherited.append(self._engines)  # kept referenced, so they are never closed here
            self._engines, self._engines_pid = OrderedDict(), os.getpid()
        engine = self._engines.pop(shard, None)
        if engine is None:
            engine = create_engine(self.conn_string_for_shard(shard), pool_size=1,
                                   connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})
        self._engines[shard] = engine
        runs = [name for name in self._engines if name != INDEX_SHARD_NAME]
        for name in runs[:-self.KEEP_OPEN]:
            self._engines.pop(name).dispose()
        return engine

    def _initdb(self, engine: Engine, for_index_shard: bool = False) -> None:
        path = engine.url.database
        if for_index_shard or not path or os.path.exists(path):  # the index, or a file that exists: Dagster's way
            super()._initdb(engine, for_index_shard=for_index_shard)
            return
        if self._empty_run_file is None:
            with tempfile.TemporaryDirectory(prefix="nemotron-event-log-") as folder:
                made = create_engine(f"sqlite:///{folder}/run.db")
                super()._initdb(made)
                made.dispose()  # its last connection closed: the file holds everything, nothing is left in a WAL
                self._empty_run_file = Path(folder, "run.db").read_bytes()
        partial = Path(f"{path}.{os.getpid()}.partial")
        with open(partial, "wb") as out:
            out.write(self._empty_run_file)
            out.flush()
            os.fsync(out.fileno())  # on disk before it has the run's name
        try:
            os.link(partial, path)  # only if no other process made the file meanwhile
        except FileExistsError:
            pass
        finally:
            partial.unlink()

    def wipe(self) -> None:
        self._close_engines()
        super().wipe()

    def dispose(self) -> None:
        self._close_engines()
        super().dispose()

    def _close_engines(self) -> None:
        if self._engines_pid == os.getpid():
            for engine in self._engines.values():
                engine.dispose()
        self._engines = OrderedDict()


def execute_assets(origin: RepositoryPythonOrigin, repo: dg.RepositoryDefinition, instance: dg.DagsterInstance,
                   asset_keys: Sequence[dg.AssetKey], partitions: Sequence[str] | None, run_config: dict,
                   tags: dict | None = None) -> RunOutcome:
    """One run materializing ``asset_keys`` for a contiguous partition range (or unpartitioned), in this process."""
    job = recon_job_from_origin(JobPythonOrigin(_job(repo, asset_keys).name, repository_origin=origin))
    started = time.monotonic()
    with dg.execute_job(job, instance, run_config=run_config, tags={**(tags or {}), **range_tags(partitions)},
                        asset_selection=list(asset_keys)) as result:
        error = "" if result.success else first_error(result.all_events)
        return RunOutcome(result.run_id, result.success, tuple(partitions or ()), error,
                          time.monotonic() - started, step_seconds=step_seconds(result.all_events))


def step_seconds(events) -> float:
    """What a run's steps took themselves, without the run's own start and end (from its step success events)."""
    return sum(event.event_specific_data.duration_ms for event in events
               if event.event_type == dg.DagsterEventType.STEP_SUCCESS) / 1000


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


# --- launched -------------------------------------------------------------------------------------------------
def remote_job_origin(origin: RepositoryPythonOrigin, job_name: str) -> RemoteJobOrigin:
    """The origin the webserver gives this job when it loads ``workspace.yaml`` (``python_module:
    nemotron_assets.definitions``, location named after the module), so launched runs belong to that location."""
    target = LoadableTargetOrigin(executable_path=origin.executable_path, module_name=DEFINITIONS_MODULE,
                                  working_directory=origin.code_pointer.working_directory)
    location = ManagedGrpcPythonEnvCodeLocationOrigin(target)
    return RemoteJobOrigin(RemoteRepositoryOrigin(location, SINGLETON_REPOSITORY_NAME), job_name)


def launch_assets(origin: RepositoryPythonOrigin, repo: dg.RepositoryDefinition, instance: dg.DagsterInstance,
                  asset_keys: Sequence[dg.AssetKey], partitions: Sequence[str] | None, run_config: dict,
                  tags: dict | None = None) -> str:
    """Create one run materializing ``asset_keys`` for a contiguous partition range (or unpartitioned) and hand it
    to the instance's run launcher; returns the run id without waiting."""
    job_def = _job(repo, asset_keys)
    run = instance.create_run_for_job(
        job_def=job_def, run_config=run_config, tags={**(tags or {}), **range_tags(partitions)},
        asset_selection=frozenset(asset_keys),
        job_code_origin=JobPythonOrigin(job_def.name, repository_origin=origin),
        remote_job_origin=remote_job_origin(origin, job_def.name),
    )
    # Straight to the launcher: the queued coordinator of the cluster instance is drained by `dagster-daemon run`,
    # which this command does not need. Ray queues the jobs until a node has a free CPU.
    instance.launch_run(run.run_id, workspace=None)
    return run.run_id


def wait_for_runs(instance: dg.DagsterInstance, launched: dict[str, tuple[str, ...]],
                  on_finished: Callable[[RunOutcome], None] | None = None, poll_seconds: float = 1.0,
                  timeout: float | None = None, stopping: Callable[[], str | None] = lambda: None
                  ) -> list[RunOutcome]:
    """Poll until every run of ``launched`` (run id -> partitions) has finished; returns the outcomes in launch
    order and calls ``on_finished`` as each one ends. A run whose worker the launcher reports failed or gone is
    marked failed; Ctrl-C (or ``timeout``) asks the launcher to stop the runs still going.

    ``stopping()`` is asked at every poll: a signal's name once the command has seen one (cli/interrupts.py), which
    stops the wait as Ctrl-C's ``KeyboardInterrupt`` does. The ``KeyboardInterrupt`` alone is not enough: raised
    wherever Python happens to be when the signal lands, it can be swallowed there (a finalizer, a library's
    ``except BaseException``), and the command then waited for every run to its end and went on to the next step."""
    started = time.monotonic()
    outcomes: dict[str, RunOutcome] = {}
    last_check = started
    try:
        while len(outcomes) < len(launched):
            check_health = time.monotonic() - last_check >= HEALTH_CHECK_SECONDS
            if check_health:
                last_check = time.monotonic()
            for run_id, partitions in launched.items():
                if run_id in outcomes:
                    continue
                run = instance.get_run_by_id(run_id)
                if run is not None and not run.is_finished and check_health:
                    run = _fail_if_worker_lost(instance, run)
                if run is None or not run.is_finished:
                    continue
                success = run.status == dg.DagsterRunStatus.SUCCESS
                steps = [record.dagster_event for record in
                         instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)]
                outcome = RunOutcome(run_id, success, partitions, "" if success else _run_error(instance, run_id),
                                     _run_seconds(instance, run_id, started), step_seconds=step_seconds(steps))
                outcomes[run_id] = outcome
                if on_finished:
                    on_finished(outcome)
            if len(outcomes) < len(launched):
                if (signal_name := stopping()) is not None:
                    raise KeyboardInterrupt(signal_name)
                if timeout is not None and time.monotonic() - started > timeout:
                    raise TimeoutError(f"{len(launched) - len(outcomes)} run(s) still going after {timeout:.0f} s")
                time.sleep(poll_seconds)
    except (KeyboardInterrupt, TimeoutError) as exc:
        going = [run_id for run_id in launched if run_id not in outcomes]
        print(f"{type(exc).__name__}: stopping {len(going)} run(s) still going", file=sys.stderr)
        for run_id in going:
            instance.run_launcher.terminate(run_id)
        raise
    return [outcomes[run_id] for run_id in launched]


def _fail_if_worker_lost(instance: dg.DagsterInstance, run):
    launcher = instance.run_launcher
    running = (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED)
    if not launcher.supports_check_run_worker_health or run.status not in running:
        return run
    health = launcher.check_run_worker_health(run)
    if health.status not in (WorkerStatus.FAILED, WorkerStatus.SUCCESS, WorkerStatus.NOT_FOUND):
        return run
    run = instance.get_run_by_id(run.run_id)  # the worker may have finished the run since the last poll
    if run is None or run.is_finished:
        return run
    message = f"the run worker ended without finishing the run ({health.status.value}): {health.msg or ''}".strip()
    instance.report_run_failed(run, message)
    return instance.get_run_by_id(run.run_id)


def _run_error(instance: dg.DagsterInstance, run_id: str) -> str:
    kinds = {dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE, dg.DagsterEventType.ENGINE_EVENT}
    records = instance.all_logs(run_id, of_type=kinds)
    events = [r.dagster_event for r in records if r.dagster_event is not None]
    error = first_error(e for e in events if e.event_type != dg.DagsterEventType.ENGINE_EVENT)
    if not error.startswith("the run failed"):
        return error
    engine_errors = [e.message for e in events if e.event_type == dg.DagsterEventType.ENGINE_EVENT
                     and e.engine_event_data and e.engine_event_data.error]
    return engine_errors[-1] if engine_errors and engine_errors[-1] else error


def _run_seconds(instance: dg.DagsterInstance, run_id: str, fallback_start: float) -> float:
    record = instance.get_run_record_by_id(run_id)
    if record is not None and record.start_time and record.end_time:
        return record.end_time - record.start_time
    return time.monotonic() - fallback_start
