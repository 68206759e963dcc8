"""The scoring path of a blend with a ``scoring:`` section (docs/architecture.md, "Scoring"):

    candidate_pool (pools scoring: lists)
        -> nll_scores (one partition per pool part, ``<pool>/part-NNNNN``; registered by candidate_pool)
    embedding_view
        -> embeddings (one partition per ``<view>/<pool>`` of the scored pools)
            -> near_duplicate_report
    nll_scores + embeddings
        -> selected_pool (``<pool>_easy``, ``<pool>_hard``, and ``<pool>_diverse`` with ``diverse_k``)

The same factory builds the sample twins (partitions.py ``Scope``). Each asset resolves its inputs and calls one
pure step (``scoring/steps.py``), which commits the files and writes the receipt last; a full build's runs then log
their W&B lineage (`scores_lineage`; resources/wandb_lineage.py). Nothing here imports torch: the steps load it
when they load a model, after checking the ``scoring`` extra.
"""

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import dagster as dg

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import PoolPartKey, near_duplicates_path, nll_scores_path, pool_dir
from nemotron_assets.core.lineage import (
    CandidatePoolInput,
    ReceiptArtifact,
    ScoresInput,
    WandbLineage,
    selection_artifact,
)
from nemotron_assets.core.partitions import Scope, scored_pool_parts_name
from nemotron_assets.core.reporting import (
    TRANSIENT_RETRIES,
    CheckOutcome,
    materialize_partitions,
    outcome_metadata,
    partitioned_asset,
    permanent_errors_fail_at_once,
)
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.scoring_settings import DIVERSE, split_selection
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.assets import REBUILD_WHEN_INPUTS_CHANGE, HarmonyAssets, RebuildConfig
from nemotron_assets.defs.scoring.inputs import (
    DIVERSE_VIEW,
    embedding_partitions,
    embedding_prefix,
    nll_prefix,
    pool_part_numbers,
    prefix_of,
    split_view_key,
)
from nemotron_assets.defs.scoring.parts import SAMPLE_PARTS
from nemotron_assets.defs.scoring.states import scored_ids_problem
from nemotron_assets.defs.scoring.steps import (
    Models,
    ScoreOutcome,
    materialize_embeddings,
    materialize_near_duplicates,
    materialize_nll_part,
    materialize_selection,
)

IDS_MATCH_POOL = "ids_match_pool_part"
SAMPLE_VIEWS = "scored_views"
SAMPLE_SELECTIONS = "selections"
_BAR_WIDTH = 30


@dataclass(frozen=True)
class ScoringAssets:
    nll_scores: dg.AssetsDefinition
    embeddings: dg.AssetsDefinition
    selected_pool: dg.AssetsDefinition
    near_duplicate_report: dg.AssetsDefinition
    part_partitions: dg.DynamicPartitionsDefinition

    @property
    def definitions(self) -> list:
        return [self.nll_scores, self.embeddings, self.selected_pool, self.near_duplicate_report]

    @property
    def rebuilt_when_inputs_change(self) -> list[dg.AssetsDefinition]:
        """The assets the post-training automation sensor re-requests once their upstream outputs were rebuilt
        (automation.py); each step then rebuilds only what its receipts call stale."""
        return self.definitions


def build_scoring_assets(blend: Blend, harmony: HarmonyAssets, scope: Scope | None = None) -> ScoringAssets:
    """Assets of the blend's ``scoring:`` section; ``harmony`` is the same scope's Harmony path."""
    if blend.scoring is None:
        raise ValueError(f"blend {blend.name} has no scoring: section")
    settings = blend.scoring
    scope = scope or Scope(blend.name)
    part_partitions = scope.partitions(SAMPLE_PARTS, dg.DynamicPartitionsDefinition(
        name=scored_pool_parts_name(blend.name)))
    view_partitions = scope.partitions(SAMPLE_VIEWS, dg.StaticPartitionsDefinition(embedding_partitions(settings)))
    selection_partitions = scope.partitions(SAMPLE_SELECTIONS, dg.StaticPartitionsDefinition(settings.selections()))
    blend_partitions = scope.partitions("blend", None)
    automation = None if scope.samples else REBUILD_WHEN_INPUTS_CHANGE  # as the Harmony and SFT assets
    every = dg.AllPartitionMapping()

    @partitioned_asset(
        scope.key("nll_scores"), group=scope.group, partitions_def=part_partitions, kinds={"parquet", "pytorch"},
        deps=[dg.AssetDep(harmony.candidate_pool, partition_mapping=every)],
        checks={IDS_MATCH_POOL: "the scored ids are the pool part's ids, in order, less the rows the renderer "
                                "dropped (counted in the receipt)"},
        backfill_policy=dg.BackfillPolicy.single_run(), retry_policy=TRANSIENT_RETRIES, automation_condition=automation,
        description="Completion-only NLL of every row of one pool part under scoring.model (its own chat template, "
                    "every assistant turn trained): nll_mean, nll_sum, tokens_scored, truncated.",
    )
    def nll_scores(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource,
                   lineage: WandbLineage):
        store = storage.get()
        models = Models(blend, log=context.log.info)
        built: list[tuple[str, dict]] = []
        with logged_lineage(context, lineage, store, blend, scope, "nll_scores", built):
            yield from materialize_partitions(
                context, dg.AssetKey(scope.key("nll_scores")), context.partition_keys,
                build=recording(built, lambda partition: score_part(context, store, blend, scope, models, partition,
                                                                    config.force)),
                check=lambda partition: [check_scored_ids(store, scope, partition)])

    @partitioned_asset(
        scope.key("embeddings"), group=scope.group, partitions_def=view_partitions, kinds={"parquet", "pytorch"},
        deps=[harmony.embedding_view], backfill_policy=dg.BackfillPolicy.single_run(), retry_policy=TRANSIENT_RETRIES,
        automation_condition=automation,
        description="One sentence embedding per row of one embedding view of a scored pool (scoring.embedding_model, "
                    "as sentence-transformers computes it).",
    )
    def embeddings(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource,
                   lineage: WandbLineage):
        store = storage.get()
        models = Models(blend, log=context.log.info)
        built: list[tuple[str, dict]] = []
        with logged_lineage(context, lineage, store, blend, scope, "embeddings", built):
            yield from materialize_partitions(
                context, dg.AssetKey(scope.key("embeddings")), context.partition_keys,
                build=recording(built, lambda partition: embed_view(context, store, scope, blend, models, partition,
                                                                    config.force)))

    @partitioned_asset(
        scope.key("selected_pool"), group=scope.group, partitions_def=selection_partitions, kinds={"parquet"},
        deps=[dg.AssetDep(nll_scores, partition_mapping=every), dg.AssetDep(embeddings, partition_mapping=every)],
        automation_condition=automation,
        backfill_policy=dg.BackfillPolicy.single_run(), retry_policy=TRANSIENT_RETRIES,
        description="Rows of a scored pool selected by NLL (<pool>_easy: lowest nll_mean quantile, <pool>_hard: "
                    "highest) or by greedy k-center on the prompt embeddings (<pool>_diverse), laid out as a pool so "
                    "sft.from can name it.",
    )
    def selected_pool(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource,
                      lineage: WandbLineage):
        store = storage.get()
        models = Models(blend, log=context.log.info)
        built: list[tuple[str, dict]] = []
        with logged_lineage(context, lineage, store, blend, scope, "selected_pool", built):
            yield from materialize_partitions(
                context, dg.AssetKey(scope.key("selected_pool")), context.partition_keys,
                build=recording(built, lambda partition: select_rows(context, store, scope, blend, models,
                                                                     partition, config.force)))

    @dg.asset(
        key=scope.key("near_duplicate_report"), group_name=scope.group, partitions_def=blend_partitions,
        deps=[dg.AssetDep(embeddings, partition_mapping=every)], kinds={"parquet", "markdown"},
        retry_policy=TRANSIENT_RETRIES, automation_condition=automation,
        description="Pairs of rows whose embeddings have cosine >= scoring.near_dup_threshold, within each view of "
                    "each scored pool, found by blocked matrix products (never the n x n matrix).",
    )
    def near_duplicate_report(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource,
                              lineage: WandbLineage):
        store = storage.get()
        sample, _ = scope.split(context.partition_keys[0]) if scope.samples else (None, None)
        with permanent_errors_fail_at_once():
            outcome, summary = materialize_near_duplicates(store, blend, scope.base(sample),
                                                           Models(blend, log=context.log.info), config.force)
        metadata = {"status": dg.MetadataValue.text(outcome.status),
                    "pairs": dg.MetadataValue.int(outcome.receipt.stats["rows"]),
                    "report": dg.MetadataValue.md(summary)}
        if lineage.enabled and not scope.samples:
            lineage.log_scores(context, store, blend.name, "near_duplicate_report",
                               scores_lineage(store, blend, "near_duplicate_report", []),
                               [("near_duplicate_report", metadata)])
        return dg.MaterializeResult(metadata=metadata)

    return ScoringAssets(nll_scores, embeddings, selected_pool, near_duplicate_report, part_partitions)


# --- lineage ------------------------------------------------------------------------------------------------------
def recording(built: list[tuple[str, dict]], build: Callable[[str], dict]) -> Callable[[str], dict]:
    """``build``, keeping each partition it built (or found up to date) and its metadata in ``built``."""
    def record(partition: str) -> dict:
        metadata = build(partition)
        built.append((partition, metadata))
        return metadata

    return record


@contextlib.contextmanager
def logged_lineage(context: dg.AssetExecutionContext, lineage: WandbLineage, store: Storage, blend: Blend,
                   scope: Scope, asset: str, built: list[tuple[str, dict]]) -> Iterator[None]:
    """After the block (also when a partition failed): a full build's W&B lineage of the partitions in ``built``
    (described only when lineage is on: describing lists the scored parts on storage)."""
    try:
        yield
    finally:
        if lineage.enabled and not scope.samples and built:
            lineage.log_scores(context, store, blend.name, asset,
                               scores_lineage(store, blend, asset, [partition for partition, _ in built]), built)


def scores_lineage(store: Storage, blend: Blend, asset: str, partitions: list[str]
                   ) -> list[tuple[ReceiptArtifact, list[ScoresInput]]]:
    """The artifacts a run of ``asset`` over ``partitions`` logs, each with what it was computed from (the
    module docstring of resources/wandb_lineage.py). A full build's outputs lie under the blend's name."""
    base = blend.name
    if asset == "nll_scores":
        pools = sorted({PoolPartKey.parse(partition).pool for partition in partitions})
        return [(nll_artifact(store, base, pool), [CandidatePoolInput(pool)]) for pool in pools]
    if asset == "embeddings":
        return [(embeddings_artifact(base, *split_view_key(key)), [CandidatePoolInput(split_view_key(key)[1])])
                for key in partitions]
    if asset == "selected_pool":
        outputs = []
        for name in partitions:
            pool, kind = split_selection(name)
            used = embeddings_artifact(base, DIVERSE_VIEW, pool) if kind == DIVERSE else nll_artifact(store, base, pool)
            outputs.append((selection_artifact(base, name), [used]))
        return outputs
    report = ReceiptArtifact(f"{base}-near-duplicates", "near-duplicate-report",
                             (prefix_of(near_duplicates_path(base)),))
    return [(report, [embeddings_artifact(base, *split_view_key(key))
                      for key in embedding_partitions(blend.scoring)])]


def nll_artifact(store: Storage, base: str, pool: str) -> ReceiptArtifact:
    """Every scored part of a pool."""
    parts = pool_part_numbers(store, base, pool)
    return ReceiptArtifact(f"{base}-nll-{pool}", "nll-scores",
                           tuple(nll_prefix(base, PoolPartKey(pool, part)) for part in parts))


def embeddings_artifact(base: str, view: str, pool: str) -> ReceiptArtifact:
    return ReceiptArtifact(f"{base}-embeddings-{view}-{pool}", "embeddings", (embedding_prefix(base, view, pool),))


# --- the steps ----------------------------------------------------------------------------------------------------
def score_part(context: dg.AssetExecutionContext, store: Storage, blend: Blend, scope: Scope, models: Models,
               partition: str, force: bool) -> dict:
    sample, part = scope.split(partition)
    base = scope.base(sample)
    outcome = materialize_nll_part(store, blend, base, PoolPartKey.parse(part), models, force)
    stats = outcome.receipt.stats
    context.log.info(f"{partition}: {outcome.status}, {stats['scored_rows']:,} of {stats['rows']:,} row(s) scored, "
                     f"{stats['tokens_scored']:,} tokens, {stats['truncated']:,} truncated, on {stats['device']}")
    return nll_metadata(outcome, store.url(nll_scores_path(base, PoolPartKey.parse(part))))


def embed_view(context: dg.AssetExecutionContext, store: Storage, scope: Scope, blend: Blend, models: Models,
               partition: str, force: bool) -> dict:
    sample, key = scope.split(partition)
    outcome = materialize_embeddings(store, blend, scope.base(sample), key, models, force)
    stats = outcome.receipt.stats
    context.log.info(f"{partition}: {outcome.status}, {stats['rows']:,} row(s) on {stats['device']}")
    return {"status": dg.MetadataValue.text(outcome.status), "rows": dg.MetadataValue.int(stats["rows"]),
            "dimension": dg.MetadataValue.int(stats["dimension"]), "device": dg.MetadataValue.text(stats["device"]),
            "model_revision": dg.MetadataValue.text(outcome.receipt.inputs["model"]["revision"])}


def select_rows(context: dg.AssetExecutionContext, store: Storage, scope: Scope, blend: Blend, models: Models,
                partition: str, force: bool) -> dict:
    sample, name = scope.split(partition)
    base = scope.base(sample)
    outcome = materialize_selection(store, blend, base, name, models, force)
    stats = outcome.receipt.stats
    context.log.info(f"{partition}: {outcome.status}, {stats['rows']:,} of {stats['candidates']:,} row(s)")
    return {"status": dg.MetadataValue.text(outcome.status), "rows": dg.MetadataValue.int(stats["rows"]),
            "candidates": dg.MetadataValue.int(stats["candidates"]),
            "selection": dg.MetadataValue.json({k: v for k, v in stats.items() if k not in ("rows", "candidates")}),
            "path": dg.MetadataValue.path(store.url(pool_dir(base, name)))}


# --- the check ----------------------------------------------------------------------------------------------------
def check_scored_ids(store: Storage, scope: Scope, partition: str) -> CheckOutcome:
    sample, part = scope.split(partition)
    problem = scored_ids_problem(store, scope.base(sample), PoolPartKey.parse(part))
    return CheckOutcome(IDS_MATCH_POOL, problem is None, {"problem": problem or "none"})


# --- metadata -----------------------------------------------------------------------------------------------------
def nll_metadata(outcome: ScoreOutcome, url: str) -> dict:
    stats = outcome.receipt.stats
    return {
        **outcome_metadata(outcome),
        "path": dg.MetadataValue.path(url),
        "rows": dg.MetadataValue.int(stats["rows"]),
        "scored_rows": dg.MetadataValue.int(stats["scored_rows"]),
        "tokens_scored": dg.MetadataValue.int(stats["tokens_scored"]),
        "truncated": dg.MetadataValue.int(stats["truncated"]),
        "dropped_by_reason": dg.MetadataValue.json(stats["dropped"]),
        "padding_fraction": dg.MetadataValue.float(float(stats["padding_fraction"])),
        "device": dg.MetadataValue.text(stats["device"]),
        "device_name": dg.MetadataValue.text(stats["device_name"]),
        "dtype": dg.MetadataValue.text(stats["dtype"]),
        "model": dg.MetadataValue.text(f"{outcome.receipt.inputs['model']['id']} "
                                       f"@ {outcome.receipt.inputs['model']['revision']}"),
        "nll_histogram": dg.MetadataValue.md(nll_histogram_markdown(stats["nll_histogram"])),
    }


def nll_histogram_markdown(histogram: dict[str, int]) -> str:
    """The ``nll_mean`` buckets as a Markdown table with text bars (as reporting.py's token histograms)."""
    top = max(histogram.values(), default=0)
    rows = ["**nll_mean (nats per scored token)**", "", "| nll_mean | rows | |", "|---:|---:|:---|"]
    for label, count in histogram.items():
        bar = "█" * max(1 if count else 0, round(_BAR_WIDTH * count / top)) if top else ""
        rows.append(f"| {label} | {count:,} | {bar} |")
    return "\n".join(rows)
