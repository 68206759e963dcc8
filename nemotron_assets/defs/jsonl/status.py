"""What ``status`` and ``verify`` say of the JSONL path (core/status.py says what the states mean).

**status**: the table "JSONL shards" (per dataset: shards planned / done / stale / failed / missing, rows written
and read) and the JSONL manifest.

**verify**: each JSONL shard hashed against its receipt and read back line by line (files.py: it decompresses, each
line is a JSON object, the lines per split are as the receipt says); then the manifest.
"""

import dagster as dg

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey, base_dir
from nemotron_assets.core.partitions import Scope
from nemotron_assets.core.pipeline import StatusRequest
from nemotron_assets.core.records import Receipt, output_path, receipt_path
from nemotron_assets.core.status import (
    RECORDED,
    DatasetStatus,
    OutputStatus,
    Plans,
    Problem,
    ShardKind,
    StatusSection,
    planned_shards,
    shard_statuses,
)
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.jsonl.files import shard_problems
from nemotron_assets.defs.jsonl.layout import jsonl_manifest_path, jsonl_shard_prefix
from nemotron_assets.defs.jsonl.shard import jsonl_datasets, jsonl_freshness, manifest_freshness


def _count(status: DatasetStatus, receipt: Receipt) -> None:
    status.rows += int(receipt.stats["rows_in"])  # rows read, and rows written per split
    status.written += sum(int(n) for n in receipt.stats["rows"].values())


SHARDS = ShardKind("jsonl", "jsonl_shard", _count)
COLUMNS = ("planned", "done", "stale", "failed", "missing", "written", "rows")


def jsonl_status(request: StatusRequest) -> list[StatusSection]:
    blend, store = request.blend, request.store
    base = base_dir(blend.name, request.sample)
    datasets = jsonl_datasets(blend)
    scope = Scope(blend.name, samples=request.sample is not None)
    section = StatusSection("JSONL shards", COLUMNS, datasets=shard_statuses(
        request.instance, store, blend, base, request.sample, SHARDS, scope.dynamic_name("jsonl_shards"),
        lambda manifest, index: jsonl_freshness(store, datasets[manifest.dataset], base, manifest, index),
        request.plans_of))
    if request.sample is None:
        state = manifest_freshness(store, datasets, base)
        written = sum(state.receipt.stats["rows"].values()) if state.done else 0
        section.outputs.append(OutputStatus("jsonl_manifest", "", state.state.value, state.reason, written))
    return [section]


def jsonl_problems(instance: dg.DagsterInstance, store: Storage, blend: Blend, plans_of: Plans = RECORDED
                   ) -> list[Problem]:
    """Each JSONL shard hashed against its receipt and read back line by line; then the manifest."""
    datasets = jsonl_datasets(blend)
    plans = plans_of.of(store, blend, blend.name, blend.datasets_of("jsonl"))
    if not plans:
        return []
    problems, troubled = [plan for plan in plans.values() if isinstance(plan, Problem)], set()
    for manifest, index in planned_shards(plans):
        key = ShardKey(manifest.dataset, index)
        prefix = jsonl_shard_prefix(blend.name, key)
        state = jsonl_freshness(store, datasets[manifest.dataset], blend.name, manifest, index, read_content=True)
        if not state.done:
            rerun = f"re-materialize {blend.name}/jsonl_shard partition '{key}'"
            problems.append(Problem(_blamed_file(store, prefix, state.receipt, state.reason),
                                    f"{state.state.value}: {state.reason}: {rerun}"))
            troubled.add(manifest.dataset)
            continue
        read_back = shard_problems(store, prefix, state.receipt)
        problems += [Problem(store.url(path), why) for path, why in read_back.items()]
    problems = plans_of.input_problems(blend.datasets_of("jsonl"), troubled) + problems
    if problems:
        return problems  # the manifest cannot be judged until the shards are right
    state = manifest_freshness(store, datasets, blend.name, read_content=True)
    if not state.done:
        problems.append(Problem(store.url(jsonl_manifest_path(blend.name)), f"{state.state.value}: {state.reason}: "
                                                                         f"re-materialize {blend.name}/jsonl_manifest"))
    return problems


def _blamed_file(store: Storage, prefix: str, receipt, reason: str) -> str:
    """The file a freshness reason is about (``its train/shard_00000.jsonl.zst file changed ...``), else the
    receipt."""
    for name in receipt.files if receipt is not None else ():
        if f"its {name} file" in reason:
            return store.url(output_path(prefix, name))
    return store.url(receipt_path(prefix))
