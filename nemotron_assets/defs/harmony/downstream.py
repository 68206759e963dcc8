"""The steps after the Harmony shards, each built and committed as every output is (core/step.py):

    harmony_dedup   <base>/harmony/<dataset>/.meta/duplicates.parquet (receipt .receipts/duplicates.json)
    candidate_pool  <base>/pools/<pool>/part-00000.parquet         (+ .meta/manifest.json, .receipts/part-00000.json)
    embedding_view  <base>/embedding/<view>/<pool>/part-00000.parquet (+ .receipts/part-00000.json), per view
    behavior_report <base>/embedding/behavior_report.md            (+ .receipts/behavior_report.json)

Each output's receipt ``inputs`` name the exact upstream files it read, by the sha256 their own receipts record, plus
its settings and this code's format version. So when a shard is rebuilt with other bytes, its dataset's dedup, every
pool, every view and the report become stale, and nothing else does; running a step again on unchanged inputs
rebuilds nothing. Every step refuses upstream outputs that are not up to date (``NotReady``, naming them).

Dedup is per dataset by default (first occurrence in shard and row order); with the blend's ``dedup:
across_datasets`` a row also repeats a row of any dataset listed before it in the blend (first occurrence in blend
order, then shard and row order).
"""

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import (
    NotReady,
    Receipt,
    freshness,
    freshness_when_ready,
    read_receipt,
    require_manifest,
)
from nemotron_assets.core.sections import POOL_NAMES
from nemotron_assets.core.status import OutputState
from nemotron_assets.core.step import Outcome, Output, Pending, ShardBuild, Staged, build_output, check, commit
from nemotron_assets.core.storage import Storage, locate_os_errors
from nemotron_assets.defs.harmony.dedup import current_shards, find_duplicates
from nemotron_assets.defs.harmony.layout import (
    DUPLICATES_FILE,
    POOL_MANIFEST_FILE,
    behavior_report_path,
    duplicates_prefix,
    embedding_view_path,
    harmony_shard_prefix,
    pool_part_path,
    pool_path,
)
from nemotron_assets.defs.harmony.pools import PoolThresholds, blend_rows, pool_part_numbers, stage_pools
from nemotron_assets.defs.harmony.report import behavior_markdown
from nemotron_assets.defs.harmony.row_texts import RowTexts
from nemotron_assets.defs.harmony.shard import HarmonyDataset, harmony_datasets
from nemotron_assets.defs.harmony.views import VIEWS, stage_views

DEDUP_FORMAT = "harmony-dedup/1"
POOL_FORMAT = "candidate-pool/1"
VIEW_FORMAT = "embedding-view/1"
REPORT_FORMAT = "behavior-report/1"


@dataclass(frozen=True)
class Curation:
    """What of the blend the steps after the shards use: its family datasets in blend order, the dedup mode, the
    candidate pools it asks for (each with its views) and whether it asks for the behavior report."""

    blend: str
    datasets: dict[str, HarmonyDataset]
    dedup: str  # per_dataset or across_datasets
    pools: tuple[str, ...] = ()  # in POOL_NAMES order (core/sections.py asked_pools)
    report: bool = False  # the blend has a curation: section

    @classmethod
    def of(cls, blend: Blend) -> "Curation":
        return cls(blend.name, harmony_datasets(blend), blend.dedup, blend.pools(), blend.curation is not None)


def prefix_of(relative: str) -> str:
    return relative.rsplit(".", 1)[0]


def _done_receipt(store: Storage, prefix: str, what: str, materialize: str) -> Receipt:
    """The receipt of an upstream output that must exist (its freshness was checked by whoever built it)."""
    receipt = read_receipt(store, prefix)
    if receipt is None:
        raise NotReady(f"{store.url(prefix)} ({what}) is not built: materialize {materialize} first")
    return receipt


def current_receipt(store: Storage, prefix: str, inputs_of, what: str, materialize: str) -> Receipt:
    """The receipt of an upstream output that must be up to date itself (``inputs_of(receipt)`` gives the inputs
    it would be built from now); ``NotReady`` naming it otherwise."""
    built = _done_receipt(store, prefix, what, materialize)
    state = freshness(store, prefix, inputs_of(built))
    if not state.done:
        raise NotReady(f"{store.url(prefix)} ({what}) is {state.state.value}: {state.reason}; materialize "
                       f"{materialize} first")
    return state.receipt


def _file_versions(receipt: Receipt) -> dict:
    return {suffix: recorded["sha256"] for suffix, recorded in receipt.files.items()}


def duplicates_sha256(receipt: Receipt) -> str:
    """The sha256 of a dedup result's one file (``.meta/duplicates.parquet``; ``.parquet`` in a receipt written
    before the ``.meta/`` folder, core/upgrade.py)."""
    (recorded,) = receipt.files.values()
    return recorded["sha256"]


# --- dedup --------------------------------------------------------------------------------------------------------
def dedup_inputs(store: Storage, curation: Curation, base: str, dataset: str) -> tuple[dict, list[list[str]]]:
    """(inputs, shard files per dataset read) of one dataset's dedup: its own shards, and with ``across_datasets``
    every family dataset's before it in the blend."""
    names = list(curation.datasets)
    read = names[: names.index(dataset) + 1] if curation.dedup == "across_datasets" else [dataset]
    paths, versions = [], {}
    for name in read:
        manifest = require_manifest(store, curation.blend, base, name)
        paths.append(current_shards(store, curation.datasets[name], base, manifest))
        for shard in manifest.shards:
            prefix = harmony_shard_prefix(base, ShardKey(name, shard.index))
            versions[str(ShardKey(name, shard.index))] = _file_versions(read_receipt(store, prefix))[".parquet"]
    return {"format": DEDUP_FORMAT, "mode": curation.dedup, "shards": versions}, paths


def materialize_dedup(store: Storage, curation: Curation, base: str, dataset: str, force: bool = False,
                      log=print) -> Outcome:
    """The dataset's duplicates: rows whose id an earlier row already has (see the module docstring)."""
    inputs, paths = dedup_inputs(store, curation, base, dataset)

    def build(folder: Path) -> Staged:
        earlier = [path for dataset_paths in paths[:-1] for path in dataset_paths]
        own = paths[-1]
        found = find_duplicates([store.url(p) for p in earlier + own], store.polars_options())
        # only this dataset's rows are its duplicates; shard numbers count from its own first shard
        mine = found.filter(pl.col("shard") >= len(earlier)).with_columns(pl.col("shard") - len(earlier))
        mine.write_parquet(folder / "duplicates.parquet", compression="zstd")
        rows = 0
        for path in own:
            with store.open(path) as stream:
                rows += pq.ParquetFile(stream).metadata.num_rows
        return Staged({DUPLICATES_FILE: folder / "duplicates.parquet"}, {"rows": rows, "duplicates": len(mine)})

    prefix = duplicates_prefix(base, dataset)
    return build_output(store, Output(prefix, inputs, DEDUP_FORMAT, prefix), build, force, log)


# --- pools --------------------------------------------------------------------------------------------------------
def pool_inputs(store: Storage, curation: Curation, base: str, thresholds: PoolThresholds) -> dict:
    """Every family dataset's shards and dedup result the pools read, and the thresholds."""
    datasets = {}
    for name in curation.datasets:
        dedup = _done_receipt(store, duplicates_prefix(base, name), f"dedup of {name!r}",
                              f"{curation.blend}/harmony_dedup partition {name!r}")
        expected, _ = dedup_inputs(store, curation, base, name)
        if dedup.inputs != expected:
            raise NotReady(f"the dedup result of {name!r} is stale (its shards changed): materialize "
                           f"{curation.blend}/harmony_dedup partition {name!r} first")
        datasets[name] = {"shards": expected["shards"], "duplicates": duplicates_sha256(dedup)}
    return {"format": POOL_FORMAT, "thresholds": asdict(thresholds), "datasets": datasets}


#: A step that judges several pools gives its steps one ``pool_inputs`` it computes once per thresholds (every pool
#: reads the same datasets, and judging them reads every shard's receipt: on S3, a GET each).
PoolInputs = Callable[[PoolThresholds], dict]


def pool_inputs_once(store: Storage, curation: Curation, base: str) -> PoolInputs:
    """``pool_inputs`` under ``base``, computed once per thresholds by what it returns (for one step or one report:
    outputs that change meanwhile are not seen)."""
    return functools.cache(functools.partial(pool_inputs, store, curation, base))


def materialize_pools(store: Storage, curation: Curation, base: str, pools: list[str], thresholds: PoolThresholds,
                      force: bool = False, log=print, inputs_of: PoolInputs | None = None) -> dict[str, Outcome]:
    """The pools ``pools`` under ``base``: those not up to date are staged together (pools.py `stage_pools`: one
    pass over the rows), then each is committed, its receipt last, in the order given."""
    unknown = [pool for pool in pools if pool not in curation.pools]
    if unknown:
        raise KeyError(f"{curation.blend} does not ask for pool(s) {', '.join(unknown)} (it asks for "
                       f"{', '.join(curation.pools)})")
    inputs = (inputs_of or (lambda t: pool_inputs(store, curation, base, t)))(thresholds)
    checked = {pool: check(store, Output(prefix_of(pool_path(base, pool)), inputs, POOL_FORMAT,
                                         prefix_of(pool_path(base, pool))), force, log) for pool in pools}
    pending = {pool: state for pool, state in checked.items() if isinstance(state, Pending)}
    if not pending:
        return checked
    with store.staging() as folder:
        folders = {pool: folder / pool for pool in pending}
        with locate_os_errors(folder):
            for pool_folder in folders.values():
                pool_folder.mkdir()
            manifests = stage_pools(blend_rows(store, curation.datasets, base), folders, thresholds)
        for pool, state in pending.items():
            staged = Staged({".parquet": folders[pool] / "part-00000.parquet",
                             POOL_MANIFEST_FILE: folders[pool] / "manifest.json"},
                            {"rows": manifests[pool]["rows"], "rows_by_dataset": manifests[pool]["rows_by_dataset"]})
            checked[pool] = commit(store, state, staged)
    return checked


# --- views and the report ----------------------------------------------------------------------------------------
def view_inputs(store: Storage, curation: Curation, base: str, pool: str, inputs_of: PoolInputs | None = None) -> dict:
    """The views read every part of the pool (views.py ``stage_views``): part 0 under ``pool``, any further part
    under ``more_pool_parts`` (absent for a one-part pool, so its views' inputs read as they always have)."""
    inputs_of = inputs_of or (lambda thresholds: pool_inputs(store, curation, base, thresholds))
    versions = {}
    for part in pool_part_numbers(store, base, pool) or [0]:
        receipt = current_receipt(store, prefix_of(pool_part_path(base, pool, part)),
                                  lambda built: inputs_of(PoolThresholds(**built.inputs["thresholds"])),
                                  f"pool {pool!r} part {part}", f"{curation.blend}/candidate_pool partition {pool!r}")
        versions[f"part-{part:05d}"] = _file_versions(receipt)[".parquet"]
    first, *more = versions.items()
    inputs = {"format": VIEW_FORMAT, "pool": first[1]}
    return {**inputs, "more_pool_parts": dict(more)} if more else inputs


def views_build(store: Storage, curation: Curation, base: str, pool: str,
                inputs_of: PoolInputs | None = None, row_texts: Callable[[], RowTexts | None] | None = None
                ) -> ShardBuild:
    """Every view of one pool, built together (they read the pool once), one receipt per view file: a build a
    `ShardRun` can fork, so a run's pools are viewed at the same time. ``row_texts``: the texts of the run's
    distinct rows (row_texts.py), computed once for all its pools; without it, or when it gives None, the pool
    computes its own."""
    inputs = view_inputs(store, curation, base, pool, inputs_of)
    first, *more = [Output(prefix_of(embedding_view_path(base, view, pool)), inputs, VIEW_FORMAT,
                           prefix_of(embedding_view_path(base, view, pool))) for view in VIEWS]

    def build(folder: Path, report, cores: int) -> dict[str, Staged]:
        texts = row_texts() if row_texts else None
        rows, staged = stage_views(store, base, pool, folder, texts.views_of(pool) if texts else None)
        return {output.prefix: Staged({".parquet": staged[view]}, {"rows": rows})
                for view, output in zip(VIEWS, [first, *more])}

    pool_bytes = sum(store.size(pool_part_path(base, pool, part)) for part in pool_part_numbers(store, base, pool))
    return ShardBuild(first, build, forkable=not store.is_s3, together=tuple(more), cost=pool_bytes)


def report_inputs(store: Storage, curation: Curation, base: str, inputs_of: PoolInputs | None = None) -> dict:
    inputs_of = inputs_of or pool_inputs_once(store, curation, base)
    versions = {}
    for pool in curation.pools:
        prefix = prefix_of(embedding_view_path(base, "behavior", pool))
        receipt = current_receipt(store, prefix,
                                  lambda _, pool=pool: view_inputs(store, curation, base, pool, inputs_of),
                                  f"the behavior view of {pool!r}",
                                  f"{curation.blend}/embedding_view partition {pool!r}")
        versions[pool] = _file_versions(receipt)[".parquet"]
    return {"format": REPORT_FORMAT, "behavior_views": versions}


def materialize_report(store: Storage, curation: Curation, base: str, force: bool = False,
                       log=print) -> tuple[Outcome, str]:
    relative = behavior_report_path(base)

    def build(folder: Path) -> Staged:
        markdown, rows = behavior_markdown(store, base, curation.pools)
        (folder / "report.md").write_text(markdown)
        return Staged({".md": folder / "report.md"}, {"rows": rows})  # the rows of every pool's behavior view

    prefix = prefix_of(relative)
    outcome = build_output(store, Output(prefix, report_inputs(store, curation, base), REPORT_FORMAT, prefix), build,
                           force, log)
    return outcome, store.read_bytes(relative).decode()


# --- what status and verify see ---------------------------------------------------------------------------------
def downstream_states(store: Storage, curation: Curation, base: str, read_content: bool = False
                      ) -> list[OutputState]:
    """The state of every output after the Harmony shards, by the one definition (core/records.py ``freshness``). An
    output whose inputs cannot be known yet (an upstream output missing or stale) is stale if it was built, else
    missing. Pool thresholds are run config, not blend settings: a pool is judged with the thresholds it was built
    with (a run with other thresholds rebuilds it)."""
    states = []
    pools_read = pool_inputs_once(store, curation, base)

    def add(asset: str, key: str, prefix: str, inputs_of) -> None:
        states.append(OutputState(asset, key, prefix,
                                  freshness_when_ready(store, prefix, inputs_of, read_content=read_content)))

    for name in curation.datasets:
        add("harmony_dedup", name, duplicates_prefix(base, name),
            lambda name=name: dedup_inputs(store, curation, base, name)[0])
    for pool in curation.pools:
        built = read_receipt(store, prefix_of(pool_path(base, pool)))
        thresholds = PoolThresholds(**built.inputs["thresholds"]) if built else PoolThresholds()
        add("candidate_pool", pool, prefix_of(pool_path(base, pool)),
            lambda thresholds=thresholds: pools_read(thresholds))
    for pool in curation.pools:
        for view in VIEWS:
            add("embedding_view", f"{view}/{pool}", prefix_of(embedding_view_path(base, view, pool)),
                lambda pool=pool: view_inputs(store, curation, base, pool, pools_read))
    if curation.report:
        add("behavior_report", "", prefix_of(behavior_report_path(base)),
            lambda: report_inputs(store, curation, base, pools_read))
    return states


def outputs_not_asked(store: Storage, curation: Curation, base: str) -> list[tuple[str, str, str]]:
    """(asset, partition, path) of the pools, views and report built earlier that the blend no longer asks for. They
    stay where they are: nothing deletes them, ``status`` lists them and ``verify`` says it skips them."""
    found = []
    for pool in POOL_NAMES:
        if pool in curation.pools:
            continue
        if read_receipt(store, prefix_of(pool_path(base, pool))) is not None:
            found.append(("candidate_pool", pool, pool_path(base, pool)))
        for view in VIEWS:
            if read_receipt(store, prefix_of(embedding_view_path(base, view, pool))) is not None:
                found.append(("embedding_view", f"{view}/{pool}", embedding_view_path(base, view, pool)))
    if not curation.report and read_receipt(store, prefix_of(behavior_report_path(base))) is not None:
        found.append(("behavior_report", "", behavior_report_path(base)))
    return found
