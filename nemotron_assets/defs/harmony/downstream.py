"""The steps after the Harmony shards, each with a receipt, so they are up to date by the same definition:

    harmony_dedup   <base>/harmony/<dataset>/duplicates.parquet   (+ duplicates.json receipt)
    candidate_pool  <base>/pools/<pool>/part-00000.parquet         (+ part-00000.json receipt, manifest.json)
    embedding_view  <base>/embedding/<view>/<pool>/part-00000.parquet (+ part-00000.json receipt), per view
    behavior_report <base>/embedding/behavior_report.md            (+ behavior_report.json receipt)

Each output's receipt ``inputs`` name the exact upstream files it read, by the sha256 their own receipts record, plus
its settings and this code's format version. So when a shard is rebuilt with other bytes, its dataset's dedup, every
pool, every view and the report become stale, and nothing else does; running a step again on unchanged inputs
rebuilds nothing. Every step refuses upstream outputs that are not up to date (``NotReady``, naming them).

Dedup is per dataset by default (first occurrence in shard and row order); with the blend's ``dedup:
across_datasets`` a row also repeats a row of any dataset listed before it in the blend (first occurrence in blend
order, then shard and row order).
"""

from dataclasses import asdict, dataclass

import polars as pl
import pyarrow.parquet as pq

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import (
    ShardKey,
    behavior_report_path,
    duplicates_path,
    embedding_view_path,
    harmony_shard_prefix,
    pool_part_path,
    pool_path,
)
from nemotron_assets.core.records import (
    Freshness,
    NotReady,
    Receipt,
    freshness,
    freshness_when_ready,
    read_receipt,
    rebuild_reason,
    require_manifest,
    write_receipt,
)
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.behavior_report import write_behavior_report
from nemotron_assets.defs.harmony.dedup import current_shards, find_duplicates
from nemotron_assets.defs.harmony.embedding import VIEWS, write_views
from nemotron_assets.defs.harmony.pools import POOL_NAMES, PoolThresholds, blend_rows, pool_part_numbers, write_pool

DEDUP_FORMAT = "harmony-dedup/1"
POOL_FORMAT = "candidate-pool/1"
VIEW_FORMAT = "embedding-view/1"
REPORT_FORMAT = "behavior-report/1"


@dataclass(frozen=True)
class StepOutcome:
    status: str  # "built" or "up to date"
    receipt: Receipt
    rebuilt_because: str = ""


def _prefix(relative: str) -> str:
    return relative.rsplit(".", 1)[0]


def _done_receipt(store: Storage, prefix: str, what: str, materialize: str) -> Receipt:
    """The receipt of an upstream output that must exist (its freshness was checked by whoever built it)."""
    receipt = read_receipt(store, prefix)
    if receipt is None:
        raise NotReady(f"{store.url(prefix)} ({what}) is not built: materialize {materialize} first")
    return receipt


def _file_versions(receipt: Receipt) -> dict:
    return {suffix: recorded["sha256"] for suffix, recorded in receipt.files.items()}


def _run(store: Storage, prefix: str, inputs: dict, force: bool, build) -> StepOutcome:
    """Skip when up to date, else build (``build`` commits the files and returns the receipt's files and stats)
    and write the receipt last."""
    current = freshness(store, prefix, inputs)
    because = rebuild_reason(current, force)
    if because is None:
        return StepOutcome("up to date", current.receipt)
    store.delete(f"{prefix}.json")
    files, stats = build()
    receipt = write_receipt(store, prefix, Receipt(kind=inputs["format"], key=prefix, inputs=inputs, files=files,
                                                   stats=stats))
    return StepOutcome("built", receipt, because)


def _committed(store: Storage, relative: str, suffix: str) -> dict:
    return {suffix: {"bytes": store.size(relative), "sha256": store.sha256(relative)}}


# --- dedup --------------------------------------------------------------------------------------------------------
def dedup_inputs(store: Storage, blend: Blend, base: str, dataset: str) -> tuple[dict, list[list[str]]]:
    """(inputs, shard files per dataset read) of one dataset's dedup: its own shards, and with ``across_datasets``
    every family dataset's before it in the blend."""
    families = [e.name for e in blend.entries() if e.family]
    read = families[: families.index(dataset) + 1] if blend.dedup == "across_datasets" else [dataset]
    paths, versions = [], {}
    for name in read:
        manifest = require_manifest(store, blend.name, base, name)
        dataset_paths = current_shards(store, blend, base, manifest)
        paths.append(dataset_paths)
        for shard in manifest.shards:
            prefix = harmony_shard_prefix(base, ShardKey(name, shard.index))
            versions[str(ShardKey(name, shard.index))] = _file_versions(read_receipt(store, prefix))[".parquet"]
    return {"format": DEDUP_FORMAT, "mode": blend.dedup, "shards": versions}, paths


def materialize_dedup(store: Storage, blend: Blend, base: str, dataset: str, force: bool = False) -> StepOutcome:
    """The dataset's duplicates: rows whose id an earlier row already has (see the module docstring)."""
    inputs, paths = dedup_inputs(store, blend, base, dataset)
    relative = duplicates_path(base, dataset)

    def build() -> tuple[dict, dict]:
        earlier = [path for dataset_paths in paths[:-1] for path in dataset_paths]
        own = paths[-1]
        found = find_duplicates([store.url(p) for p in earlier + own], store.polars_options())
        # only this dataset's rows are its duplicates; shard numbers count from its own first shard
        mine = found.filter(pl.col("shard") >= len(earlier)).with_columns(pl.col("shard") - len(earlier))
        rows = sum(_rows(store, p) for p in own)
        with store.staging() as folder:
            staged = folder / "duplicates.parquet"
            mine.write_parquet(staged, compression="zstd")
            store.commit(staged, relative)
        return _committed(store, relative, ".parquet"), {"rows": rows, "duplicates": len(mine)}

    return _run(store, _prefix(relative), inputs, force, build)


def _rows(store: Storage, relative: str) -> int:
    with store.open(relative) as stream:
        return pq.ParquetFile(stream).metadata.num_rows


# --- pools --------------------------------------------------------------------------------------------------------
def pool_inputs(store: Storage, blend: Blend, base: str, thresholds: PoolThresholds) -> dict:
    """Every family dataset's shards and dedup result the pools read, and the thresholds."""
    datasets = {}
    for entry in [e for e in blend.entries() if e.family]:
        dedup = _done_receipt(store, _prefix(duplicates_path(base, entry.name)), f"dedup of {entry.name!r}",
                              f"{blend.name}/harmony_dedup partition {entry.name!r}")
        expected, _ = dedup_inputs(store, blend, base, entry.name)
        if dedup.inputs != expected:
            raise NotReady(f"the dedup result of {entry.name!r} is stale (its shards changed): materialize "
                           f"{blend.name}/harmony_dedup partition {entry.name!r} first")
        datasets[entry.name] = {"shards": expected["shards"], "duplicates": _file_versions(dedup)[".parquet"]}
    return {"format": POOL_FORMAT, "thresholds": asdict(thresholds), "datasets": datasets}


def materialize_pool(store: Storage, blend: Blend, base: str, pool: str, thresholds: PoolThresholds,
                     force: bool = False) -> StepOutcome:
    if pool not in POOL_NAMES:
        raise KeyError(f"unknown pool {pool!r}")
    relative = pool_path(base, pool)

    def build() -> tuple[dict, dict]:
        manifest = write_pool(store, base, blend_rows(store, blend, base), pool, thresholds)
        return _committed(store, relative, ".parquet"), {"rows": manifest["rows"],
                                                         "rows_by_dataset": manifest["rows_by_dataset"]}

    return _run(store, _prefix(relative), pool_inputs(store, blend, base, thresholds), force, build)


# --- views and the report ----------------------------------------------------------------------------------------
def view_inputs(store: Storage, blend: Blend, base: str, pool: str) -> dict:
    """The views read every part of the pool (embedding.py ``write_views``): part 0 under ``pool``, any further
    part under ``more_pool_parts`` (absent for a one-part pool, so its views' inputs read as they always have)."""
    versions = {}
    for part in pool_part_numbers(store, base, pool) or [0]:
        receipt = _current(store, _prefix(pool_part_path(base, pool, part)), lambda built: pool_inputs(
            store, blend, base, PoolThresholds(**built.inputs["thresholds"])), f"pool {pool!r} part {part}",
            f"{blend.name}/candidate_pool partition {pool!r}")
        versions[f"part-{part:05d}"] = _file_versions(receipt)[".parquet"]
    first, *more = versions.items()
    inputs = {"format": VIEW_FORMAT, "pool": first[1]}
    return {**inputs, "more_pool_parts": dict(more)} if more else inputs


def _current(store: Storage, prefix: str, inputs_of, what: str, materialize: str) -> Receipt:
    """The receipt of an upstream output that must be up to date itself (``inputs_of(receipt)`` gives the inputs
    it would be built from now); ``NotReady`` naming it otherwise."""
    built = _done_receipt(store, prefix, what, materialize)
    state = freshness(store, prefix, inputs_of(built))
    if not state.done:
        raise NotReady(f"{store.url(prefix)} ({what}) is {state.state.value}: {state.reason}; materialize "
                       f"{materialize} first")
    return state.receipt


def materialize_views(store: Storage, blend: Blend, base: str, pool: str, force: bool = False) -> list[StepOutcome]:
    """Every view of one pool (built together: they read the pool once); one receipt per view file."""
    inputs = view_inputs(store, blend, base, pool)
    prefixes = [_prefix(embedding_view_path(base, view, pool)) for view in VIEWS]
    states = [rebuild_reason(freshness(store, prefix, inputs), force) for prefix in prefixes]
    if all(state is None for state in states):
        return [StepOutcome("up to date", read_receipt(store, prefix)) for prefix in prefixes]
    for prefix in prefixes:
        store.delete(f"{prefix}.json")
    rows = write_views(store, base, pool)
    outcomes = []
    for prefix, because in zip(prefixes, states):
        files = _committed(store, f"{prefix}.parquet", ".parquet")
        receipt = write_receipt(store, prefix, Receipt(VIEW_FORMAT, prefix, inputs, files, {"rows": rows}))
        outcomes.append(StepOutcome("built", receipt, because or ""))
    return outcomes


def report_inputs(store: Storage, blend: Blend, base: str) -> dict:
    versions = {}
    for pool in POOL_NAMES:
        prefix = _prefix(embedding_view_path(base, "behavior", pool))
        receipt = _current(store, prefix, lambda _, pool=pool: view_inputs(store, blend, base, pool),
                           f"the behavior view of {pool!r}", f"{blend.name}/embedding_view partition {pool!r}")
        versions[pool] = _file_versions(receipt)[".parquet"]
    return {"format": REPORT_FORMAT, "behavior_views": versions}


def materialize_report(store: Storage, blend: Blend, base: str, force: bool = False) -> tuple[StepOutcome, str]:
    relative = behavior_report_path(base)
    report: list[str] = []

    def build() -> tuple[dict, dict]:
        report.append(write_behavior_report(store, base))
        return _committed(store, relative, ".md"), {}

    outcome = _run(store, _prefix(relative), report_inputs(store, blend, base), force, build)
    return outcome, report[0] if report else store.read_bytes(relative).decode()


# --- what status and verify see ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class OutputState:
    asset: str  # harmony_dedup, candidate_pool, embedding_view, behavior_report
    key: str  # its partition (a dataset, a pool, "<view>/<pool>"), or "" for the report
    prefix: str  # the output's path without suffix; its receipt is prefix + ".json"
    freshness: Freshness


def downstream_states(store: Storage, blend: Blend, base: str, read_content: bool = False) -> list[OutputState]:
    """The state of every output after the Harmony shards, by the one definition (records.py ``freshness``). An
    output whose inputs cannot be known yet (an upstream output missing or stale) is stale if it was built, else
    missing. Pool thresholds are run config, not blend settings: a pool is judged with the thresholds it was built
    with (a run with other thresholds rebuilds it)."""
    states = []

    def add(asset: str, key: str, relative: str, inputs_of) -> None:
        prefix = _prefix(relative)
        states.append(OutputState(asset, key, prefix,
                                  freshness_when_ready(store, prefix, inputs_of, read_content=read_content)))

    for entry in [e for e in blend.entries() if e.family]:
        add("harmony_dedup", entry.name, duplicates_path(base, entry.name),
            lambda name=entry.name: dedup_inputs(store, blend, base, name)[0])
    for pool in POOL_NAMES:
        built = read_receipt(store, _prefix(pool_path(base, pool)))
        thresholds = PoolThresholds(**built.inputs["thresholds"]) if built else PoolThresholds()
        add("candidate_pool", pool, pool_path(base, pool),
            lambda thresholds=thresholds: pool_inputs(store, blend, base, thresholds))
    for pool in POOL_NAMES:
        for view in VIEWS:
            add("embedding_view", f"{view}/{pool}", embedding_view_path(base, view, pool),
                lambda pool=pool: view_inputs(store, blend, base, pool))
    add("behavior_report", "", behavior_report_path(base), lambda: report_inputs(store, blend, base))
    return states
