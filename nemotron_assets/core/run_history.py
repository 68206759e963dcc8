"""What the Dagster instance knows about a blend's partitions: which failed last, and what each materialization
recorded. ``status`` and ``verify`` combine it with storage (core/records.py), which alone decides whether an output is
done: a run's failure never makes a shard it finished look failed.
"""

from dataclasses import dataclass, field

import dagster as dg


@dataclass(frozen=True)
class PartitionHistory:
    """The instance's view of one asset's partitions."""

    failed: frozenset[str] = frozenset()  # partitions whose latest attempt failed
    failed_because: dict[str, str] = field(default_factory=dict)  # failed partition -> its located error
    metadata: dict[str, dict] = field(default_factory=dict)  # latest materialization metadata per partition


def partition_statuses(instance: dg.DagsterInstance, asset_key: dg.AssetKey,
                       partitions_def: dg.PartitionsDefinition, keys: list[str]) -> dict[str, str | None]:
    """MATERIALIZED / FAILED / IN_PROGRESS (or None: never materialized) per key, as the UI shows them.

    FAILED means the latest attempt at that partition failed. A run covering several partitions records each
    finished partition as materialized and only the ones it could not build as failed (core/reporting.py).
    """
    if not keys:
        return {}
    statuses = instance.get_status_by_partition(asset_key, keys, partitions_def) or {}
    return {key: statuses[key].value if statuses.get(key) is not None else None for key in keys}


def latest_metadata(instance: dg.DagsterInstance, asset_key: dg.AssetKey, keys: list[str]) -> dict[str, dict]:
    """The metadata of each partition's latest materialization, newest events first, paging until all are seen."""
    wanted, found, cursor = set(keys), {}, None
    while wanted - found.keys():
        page = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=asset_key), limit=1000,
                                               cursor=cursor)
        for record in page.records:
            partition = record.partition_key
            if partition in wanted and partition not in found:
                found[partition] = {k: v.value for k, v in record.asset_materialization.metadata.items()}
        if not page.has_more:
            break
        cursor = page.cursor
    return found


def partition_history(instance: dg.DagsterInstance, asset_key: dg.AssetKey, partitions_name: str,
                      keys: list[str], with_metadata: bool = False) -> PartitionHistory:
    """Failed partitions (and the latest metadata) of a dynamically partitioned asset, named without building the
    assets (that would cost a load of every blend)."""
    partitions = dg.DynamicPartitionsDefinition(name=partitions_name)
    statuses = partition_statuses(instance, asset_key, partitions, keys)
    metadata = latest_metadata(instance, asset_key, keys) if with_metadata else {}
    failed = frozenset(k for k, s in statuses.items() if s == "FAILED")
    because = failure_reasons(instance, asset_key, sorted(failed))
    return PartitionHistory(failed, failed_because=because, metadata=metadata)


def failure_reasons(instance: dg.DagsterInstance, asset_key: dg.AssetKey, keys: list[str]) -> dict[str, str]:
    """Why each failed partition of ``keys`` failed: its line in the message of the step that last planned it,
    which names every partition the step could not build with its located error (core/reporting.py
    ``failure_summary``)."""
    found, step_errors = {}, {}
    for partition in keys:
        planned = instance.get_latest_planned_materialization_info(asset_key, partition)
        if planned is None:
            continue
        if planned.run_id not in step_errors:
            step_errors[planned.run_id] = _step_error(instance, planned.run_id)
        found[partition] = _line_of(step_errors[planned.run_id], partition)
    return found


def _step_error(instance: dg.DagsterInstance, run_id: str) -> str:
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        error = record.dagster_event.step_failure_data.error
        while error is not None and error.cause is not None and error.cls_name != "Failure":
            error = error.cause
        if error is not None:
            return error.message
    return ""


def _line_of(message: str, partition: str) -> str:
    """The partition's error in a step's failure message; the run failed without naming it: a generic line."""
    for line in message.splitlines():
        at = line.find(f"{partition}: ")
        if at >= 0:
            return line[at + len(partition) + 2:].strip()
    return "its run failed (see the run's logs in the Dagster UI)"
