"""How an asset step reports the partitions of its run: each one on its own, and failures that explain themselves.

A backfill run covers many partitions. ``materialize_partitions`` attempts every one of them, whatever happens to the
others, and records each success as that partition's own ``AssetMaterialization`` (with its own metadata) the
moment it is done, followed by that partition's check results. Only then, if any partition failed, the step fails
with one message naming every failed partition and its located error. So a finished shard is materialized in the
UI and in ``status`` even when its run failed, and the failed ones can be re-run alone.

Retries (`retry_transient_errors`, on every building step) are for transient trouble, such as a storage endpoint
that drops a connection (s3fs raises those as ``OSError``s). Errors that a retry cannot fix fail at once:

- an ``InputError`` (bad data, a bad blend setting), which names dataset, file, line and field;
- a ``NotReady`` (an upstream output missing or stale), which names the outputs and what to materialize;
- an ``OSError`` whose errno says the disk, the quota or the permissions are the problem (``PERMANENT_ERRNOS``):
  decided by errno, not by exception type, because connection errors are ``OSError``s too.

An interrupted step (Ctrl-C, SIGTERM, a run terminated from the UI) is never retried: it stops, and the run ends
canceled (terminated from the UI) or failed.
"""

import contextlib
import errno
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import dagster as dg

# Private: the check evaluation's link to the materialization it checked has no public constructor in Dagster
# 1.13. Without it the UI shows a partition's check as not run for its latest materialization.
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from nemotron_assets.core.allocator import give_back_free_memory, tune_malloc_for_builds
from nemotron_assets.core.records import NotReady
from nemotron_assets.sources.errors import InputError

_BAR_WIDTH = 30
# Retries for transient trouble only: every error a retry cannot fix fails the step without them (below).
MAX_RETRIES, FIRST_RETRY_DELAY_S = 2, 1.0
PERMANENT_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
                    errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied"}


@dataclass
class CheckOutcome:
    name: str
    passed: bool
    metadata: dict = field(default_factory=dict)


def partitioned_asset(key: list[str], *, group: str, partitions_def: dg.PartitionsDefinition | None,
                      description: str, kinds: set[str], deps: list | None = None, checks: dict[str, str] | None = None,
                      backfill_policy: dg.BackfillPolicy | None = None,
                      automation_condition: dg.AutomationCondition | None = None):
    """The decorator of an asset whose step reports partition by partition (``materialize_partitions``).

    It is a one-asset ``multi_asset`` with ``can_subset=True``: then neither the asset's output nor its checks'
    outputs are required, so the step may record its materializations and check evaluations as events, one per
    partition, and report nothing for a partition it could not build (a plain ``@asset`` demands one output, which
    Dagster would record for every partition of the run at once).
    """
    check_specs = [dg.AssetCheckSpec(name, asset=key, partitions_def=partitions_def, description=text)
                   for name, text in (checks or {}).items()]
    return dg.multi_asset(
        name="__".join(key), specs=[dg.AssetSpec(key, group_name=group, description=description, kinds=kinds,
                                                 deps=deps or [], skippable=True,
                                                 automation_condition=automation_condition)],
        check_specs=check_specs, partitions_def=partitions_def, can_subset=True, backfill_policy=backfill_policy)


def retry_transient_errors(compute: Callable) -> Callable:
    """A step's compute function, retried (a new attempt of the step, ``MAX_RETRIES`` at most, 1 s then 2 s later)
    when it fails with an error a retry may fix (`describe_failure`).

    Not a Dagster ``RetryPolicy``: under a policy, Dagster also retries a step that was *interrupted*, so Ctrl-C or
    terminating the run in the UI would start the build over. Here only exceptions are retried; an interrupt is a
    ``BaseException`` and passes through, so Dagster ends the run as interrupted.

    When the step ends, however it ends, the memory it freed goes back to the system (core/allocator.py
    ``give_back_free_memory``)."""

    def again(context, exc: Exception) -> None:
        if describe_failure(exc)[1]:  # Dagster counts the attempts, and fails "Exceeded max_retries" at the end
            raise dg.RetryRequested(max_retries=MAX_RETRIES,
                                    seconds_to_wait=FIRST_RETRY_DELAY_S * 2 ** context.retry_number) from exc

    if inspect.isgeneratorfunction(compute):
        @functools.wraps(compute)
        def steps(context, *args, **kwargs):
            try:
                yield from compute(context, *args, **kwargs)
            except Exception as exc:
                again(context, exc)
                raise
            finally:
                give_back_free_memory()
        return steps

    @functools.wraps(compute)
    def step(context, *args, **kwargs):
        try:
            return compute(context, *args, **kwargs)
        except Exception as exc:
            again(context, exc)
            raise
        finally:
            give_back_free_memory()
    return step


def materialize_partitions(context: dg.AssetExecutionContext, asset_key: dg.AssetKey, partitions: Iterable[str],
                           build: Callable[[str], dict],
                           check: Callable[[str], list[CheckOutcome]] | None = None) -> Iterator:
    """Build every partition (``build`` returns its metadata), yield each one's materialization and then its check
    results (``check`` re-reads what was committed), and at the end fail naming every partition that failed, or
    yield the outputs of the checks evaluated (`_check_outputs`).

    When only the asset's checks are selected (the UI's "Execute checks"), nothing is built: the checks run on the
    partitions' committed outputs.
    """
    build_them = asset_key in context.selected_asset_keys
    if build_them:
        tune_malloc_for_builds()  # this process builds now, and so will those it forks (core/allocator.py)
    wanted_checks = {key.name for key in context.selected_asset_check_keys}
    evaluated: set[str] = set()
    failures: list[tuple[str, str, bool]] = []  # (partition, located message, retryable)
    for partition in partitions:
        try:
            if build_them:
                metadata = build(partition)
                yield dg.AssetMaterialization(asset_key=asset_key, partition=partition, metadata=metadata)
            outcomes = check(partition) if check is not None and wanted_checks else []
        except Exception as exc:  # noqa: BLE001 - every partition is attempted; the step fails at the end
            message, retryable = describe_failure(exc)
            failures.append((partition, message, retryable))
            context.log.error(f"{partition}: FAILED: {message}")
            continue
        target = _latest_materialization(context.instance, asset_key, partition) if outcomes else None
        for outcome in outcomes:
            if outcome.name in wanted_checks:
                evaluated.add(outcome.name)
                yield dg.AssetCheckEvaluation(asset_key=asset_key, check_name=outcome.name, passed=outcome.passed,
                                              metadata=outcome.metadata, partition=partition,
                                              target_materialization_data=target)
    if failures:
        raise dg.Failure(description=failure_summary(failures), allow_retries=any(r for _, _, r in failures))
    yield from _check_outputs(context, asset_key, evaluated)


def _check_outputs(context: dg.AssetExecutionContext, asset_key: dg.AssetKey, evaluated: set[str]) -> Iterator:
    """One empty ``Output`` per check the step evaluated: the step's outputs for its checks.

    Dagster counts a selected check as done when the step yields its output: an ``AssetCheckResult`` yields it
    (and becomes an evaluation of the step's one partition key), an ``AssetCheckEvaluation`` does not. A run of
    many partitions has no single partition key, so the evaluations above are per partition, and without these
    outputs Dagster logs "did not yield or return expected outputs" for every check of every run. An output may
    be yielded once per step, so it comes after the last partition. A check evaluated for no partition gets none,
    and that message is then news."""
    for name in sorted(evaluated):
        output_name = context.assets_def.get_output_name_for_asset_check_key(dg.AssetCheckKey(asset_key, name))
        yield dg.Output(None, output_name=output_name)


def recorded_metadata(instance: dg.DagsterInstance, asset_key: dg.AssetKey, partition: str) -> dict | None:
    """The metadata of the partition's latest materialization, as plain values (None: never materialized)."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition]), limit=1).records
    if not records:
        return None
    return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}


def failure_summary(failures: list[tuple[str, str, bool]]) -> str:
    if len(failures) == 1:
        partition, message, _ = failures[0]
        return f"{partition}: {message}"
    lines = [f"- {partition}: {message}" for partition, message, _ in failures]
    return "\n".join([f"{len(failures)} partitions failed:", *lines])


def describe_failure(exc: BaseException) -> tuple[str, bool]:
    """(one-line located message, whether a retry could help) for an error that stopped one partition."""
    if isinstance(exc, (InputError, NotReady)):
        return str(exc), False
    if isinstance(exc, dg.Failure):
        return exc.description or str(exc), bool(exc.allow_retries)
    if isinstance(exc, OSError) and exc.errno in PERMANENT_ERRNOS:
        where = f"{exc.filename}: " if exc.filename else ""
        return (f"{where}{exc.strerror or PERMANENT_ERRNOS[exc.errno]} ({errno.errorcode[exc.errno]}: "
                f"{PERMANENT_ERRNOS[exc.errno]}; not retried)", False)
    return f"{type(exc).__name__}: {exc}", True


@contextlib.contextmanager
def permanent_errors_fail_at_once() -> Iterator[None]:
    """For a step that builds one thing: an error a retry cannot fix becomes a ``dg.Failure`` without retries,
    carrying the located one-line message; anything else propagates and may be retried."""
    try:
        yield
    except Exception as exc:
        message, retryable = describe_failure(exc)
        if retryable:
            raise
        raise dg.Failure(description=message, allow_retries=False) from exc


def _latest_materialization(instance: dg.DagsterInstance, asset_key: dg.AssetKey, partition: str):
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition]), limit=1).records
    if not records:
        return None
    record = records[0]
    return AssetCheckEvaluationTargetMaterializationData(storage_id=record.storage_id,
                                                         run_id=record.event_log_entry.run_id,
                                                         timestamp=record.timestamp)


def outcome_metadata(outcome) -> dict:
    """The first two entries of every step's metadata: whether it was built or found up to date, and why it was
    rebuilt (``-`` when it was not). ``outcome``: any step's outcome (``status``, ``rebuilt_because``)."""
    return {"status": dg.MetadataValue.text(outcome.status),
            "rebuilt_because": dg.MetadataValue.text(outcome.rebuilt_because or "-")}


def histogram_markdown(counts: list[int], title: str = "Document length (tokens)") -> str:
    """Log2-bucketed histogram as a Markdown table with text bars."""
    nonzero = [i for i, c in enumerate(counts) if c]
    if not nonzero:
        return f"**{title}**: no non-empty documents"
    top = max(counts)
    rows = [f"**{title}**", "", "| tokens | documents | |", "|---:|---:|:---|"]
    for i in range(nonzero[0], nonzero[-1] + 1):
        low, high = 2**i, 2 ** (i + 1) - 1
        label = f"{low:,}+" if i == len(counts) - 1 else (f"{low:,}" if low == high else f"{low:,}–{high:,}")
        bar = "█" * max(1 if counts[i] else 0, round(_BAR_WIDTH * counts[i] / top))
        rows.append(f"| {label} | {counts[i]:,} | {bar} |")
    return "\n".join(rows)

