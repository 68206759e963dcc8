"""What ``status`` and ``verify`` say of the Harmony curation path (core/status.py says what the states mean).

**status**: the table "Harmony shards" (per dataset: shards planned / done / stale / failed / missing, rows written
and read) and "Post-training outputs": each dataset's dedup, and each pool, view and report the blend asks for, done /
stale / missing by the same definition. Pools, views and a report built earlier that the blend no longer asks for are
listed as ``not_in_blend``: kept on disk, never deleted.

**verify**: each Harmony shard hashed against its receipt, its schema and row count checked; then the dedup results,
and the pools, views and report the blend asks for, by the same definition, and their row counts. Those it no longer
asks for are skipped, and verify says so.
"""

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey, base_dir
from nemotron_assets.core.partitions import Scope
from nemotron_assets.core.pipeline import StatusRequest
from nemotron_assets.core.records import Receipt, stored_path
from nemotron_assets.core.status import (
    KEPT_NOT_ASKED,
    NOT_IN_BLEND,
    RECORDED,
    DatasetStatus,
    OutputStatus,
    Plans,
    Problem,
    ShardKind,
    StatusSection,
    output_statuses,
    planned_shards,
    shard_statuses,
)
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.build import SCHEMA as HARMONY_SCHEMA
from nemotron_assets.defs.harmony.downstream import Curation, downstream_states, outputs_not_asked
from nemotron_assets.defs.harmony.layout import duplicates_path, harmony_shard_prefix
from nemotron_assets.defs.harmony.shard import harmony_freshness


def _count(status: DatasetStatus, receipt: Receipt) -> None:
    status.rows += int(receipt.stats["rows"])
    status.written += int(receipt.stats["records"])


SHARDS = ShardKind("harmony", "harmony_shard", _count)
COLUMNS = ("planned", "done", "stale", "failed", "missing", "written", "rows")


def harmony_status(request: StatusRequest) -> list[StatusSection]:
    blend, store = request.blend, request.store
    base = base_dir(blend.name, request.sample)
    curation = Curation.of(blend)
    scope = Scope(blend.name, samples=request.sample is not None)
    shards = StatusSection("Harmony shards", COLUMNS, datasets=shard_statuses(
        request.instance, store, blend, base, request.sample, SHARDS, scope.dynamic_name("harmony_shards"),
        lambda manifest, index: harmony_freshness(store, curation.datasets[manifest.dataset], base, manifest,
                                                  index), request.plans_of))
    if request.sample is not None:
        return [shards]
    kept = [OutputStatus(asset, key, NOT_IN_BLEND, KEPT_NOT_ASKED) for asset, key, _ in
            outputs_not_asked(store, curation, base)]
    return [shards, StatusSection("Post-training outputs",
                                  outputs=output_statuses(downstream_states(store, curation, base)) + kept)]


def harmony_problems(instance: dg.DagsterInstance, store: Storage, blend: Blend, plans_of: Plans = RECORDED
                     ) -> list[Problem]:
    curation = Curation.of(blend)
    plans = plans_of.of(store, blend, blend.name, blend.datasets_of("harmony"))
    if not plans:
        return []
    problems, troubled = [plan for plan in plans.values() if isinstance(plan, Problem)], set()
    for manifest, index in planned_shards(plans):
        key = ShardKey(manifest.dataset, index)
        prefix = harmony_shard_prefix(blend.name, key)
        state = harmony_freshness(store, curation.datasets[manifest.dataset], blend.name, manifest, index,
                                  read_content=True)
        if not state.done:
            rerun = f"re-materialize {blend.name}/harmony_shard partition '{key}'"
            problems.append(Problem(store.url(f"{prefix}.parquet"), f"{state.state.value}: {state.reason}: {rerun}"))
            troubled.add(manifest.dataset)
            continue
        problems += parquet_problems(store, f"{prefix}.parquet", state.receipt.stats["records"], HARMONY_SCHEMA)
    problems = plans_of.input_problems(blend.datasets_of("harmony"), troubled) + problems
    problems += [Problem(store.url(path), f"{blend.name}/{asset}" + (f" partition '{key}'" if key else "")
                         + f": {KEPT_NOT_ASKED}", skipped=True)
                 for asset, key, path in outputs_not_asked(store, curation, blend.name)]
    if any(not problem.skipped for problem in problems):
        return problems  # what is built from the shards cannot be judged until they are right
    for output in downstream_states(store, curation, blend.name, read_content=True):
        suffix = ".md" if output.asset == "behavior_report" else ".parquet"
        url = store.url(stored_path(store, duplicates_path(blend.name, output.key)) if output.asset == "harmony_dedup"
                        else output.prefix + suffix)
        what = f"{blend.name}/{output.asset}" + (f" partition '{output.key}'" if output.key else "")
        if not output.freshness.done:
            problems.append(Problem(url, f"{output.freshness.state.value}: {output.freshness.reason}: "
                                         f"re-materialize {what}"))
        elif suffix == ".parquet" and "rows" in output.freshness.receipt.stats and output.asset != "harmony_dedup":
            problems += parquet_problems(store, output.prefix + suffix, output.freshness.receipt.stats["rows"])
    return problems


def parquet_problems(store: Storage, relative: str, rows: int, schema: pa.Schema | None = None) -> list[Problem]:
    """The file's row count (and schema) against what its receipt records."""
    with store.open(relative) as stream:
        metadata = pq.ParquetFile(stream).metadata
        found_schema = metadata.schema.to_arrow_schema()
    problems = []
    if metadata.num_rows != rows:
        problems.append(Problem(store.url(relative), f"holds {metadata.num_rows:,} rows, its receipt says {rows:,}"))
    if schema is not None and not found_schema.equals(schema):
        missing = sorted(set(schema.names) - set(found_schema.names))
        problems.append(Problem(store.url(relative), f"its columns are not the normalized schema (missing: "
                                                     f"{', '.join(missing) or 'none'}; other types or order)"))
    return problems
