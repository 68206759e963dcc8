"""The scoring path of a blend with a ``scoring:`` section (docs/architecture.md, "Scoring"):

    candidate_pool (pools scoring: lists)
        -> nll_scores (one partition per pool part, ``<pool>/part-NNNNN``; registered by candidate_pool)
    embedding_view
        -> embeddings (one partition per ``<view>/<pool>`` of the scored pools)
            -> near_duplicate_report
    nll_scores + embeddings
        -> selected_pool (``<pool>_easy``, ``<pool>_hard``, and ``<pool>_diverse`` with ``diverse_k``)

The same factory builds the sample twins (core/partitions.py). Each asset resolves its inputs and calls one
step (steps.py), which commits the files and writes the receipt last; a full build's runs then log
their W&B lineage (lineage.py). Nothing here imports torch: the steps load it
when they load a model, after checking the ``scoring`` extra.
"""

import dagster as dg

from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.pipeline import Assets, BlendScope
from nemotron_assets.core.reporting import (
    CheckOutcome,
    materialize_partitions,
    outcome_metadata,
    partitioned_asset,
    permanent_errors_fail_at_once,
    retry_transient_errors,
)
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.step import Outcome
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.assets import RebuildConfig
from nemotron_assets.defs.harmony.layout import PoolPartKey, pool_dir
from nemotron_assets.defs.scoring.inputs import Scoring, embedding_partitions
from nemotron_assets.defs.scoring.layout import nll_scores_path
from nemotron_assets.defs.scoring.lineage import log_scores, logged_lineage, recording, scores_lineage
from nemotron_assets.defs.scoring.parts import PARTS
from nemotron_assets.defs.scoring.status import scored_ids_problem
from nemotron_assets.defs.scoring.steps import (
    Models,
    materialize_embeddings,
    materialize_near_duplicates,
    materialize_nll_part,
    materialize_selection,
)

IDS_MATCH_POOL = "ids_match_pool_part"
SAMPLE_VIEWS = "scored_views"  # the sample twins' partitions of the full build's static views and selections
SAMPLE_SELECTIONS = "selections"
_BAR_WIDTH = 30


def build_scoring_assets(blend_scope: BlendScope, upstream: Assets) -> Assets:
    """The assets of the blend's ``scoring:`` section (full build or samples); ``upstream`` holds the same scope's
    Harmony assets."""
    blend, scope = blend_scope.blend, blend_scope.scope
    scoring = Scoring.of(blend)
    settings = scoring.settings
    part_partitions = scope.dynamic(PARTS)
    view_partitions = scope.partitions(SAMPLE_VIEWS, dg.StaticPartitionsDefinition(embedding_partitions(settings)))
    selection_partitions = scope.partitions(SAMPLE_SELECTIONS, dg.StaticPartitionsDefinition(settings.selections()))
    blend_partitions = scope.partitions("blend", None)
    every = dg.AllPartitionMapping()

    @partitioned_asset(
        scope.key("nll_scores"), group=scope.group, partitions_def=part_partitions, kinds={"parquet", "pytorch"},
        deps=[dg.AssetDep(upstream["candidate_pool"], partition_mapping=every)],
        checks={IDS_MATCH_POOL: "the scored ids are the pool part's ids, in order, less the rows the renderer "
                                "dropped (counted in the receipt)"},
        backfill_policy=dg.BackfillPolicy.single_run(),
        description="Completion-only NLL of every row of one pool part under scoring.model (its own chat template, "
                    "every assistant turn trained): nll_mean, nll_sum, tokens_scored, truncated.",
    )
    @retry_transient_errors
    def nll_scores(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource,
                   lineage: WandbLineage):
        store = storage.get()
        models = Models(settings, log=context.log.info)
        built: list[tuple[str, dict]] = []
        with logged_lineage(context, lineage, store, scoring, scope.samples, "nll_scores", built):
            yield from materialize_partitions(
                context, dg.AssetKey(scope.key("nll_scores")), context.partition_keys,
                build=recording(built, lambda partition: score_part(context, store, scoring, scope, models, partition,
                                                                    config.force)),
                check=lambda partition: [check_scored_ids(store, scope, partition)])

    @partitioned_asset(
        scope.key("embeddings"), group=scope.group, partitions_def=view_partitions, kinds={"parquet", "pytorch"},
        deps=[upstream["embedding_view"]], backfill_policy=dg.BackfillPolicy.single_run(),
        description="One sentence embedding per row of one embedding view of a scored pool (scoring.embedding_model, "
                    "as sentence-transformers computes it).",
    )
    @retry_transient_errors
    def embeddings(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource,
                   lineage: WandbLineage):
        store = storage.get()
        models = Models(settings, log=context.log.info)
        built: list[tuple[str, dict]] = []
        with logged_lineage(context, lineage, store, scoring, scope.samples, "embeddings", built):
            yield from materialize_partitions(
                context, dg.AssetKey(scope.key("embeddings")), context.partition_keys,
                build=recording(built, lambda partition: embed_view(context, store, scope, scoring, models, partition,
                                                                    config.force)))

    @partitioned_asset(
        scope.key("selected_pool"), group=scope.group, partitions_def=selection_partitions, kinds={"parquet"},
        deps=[dg.AssetDep(nll_scores, partition_mapping=every), dg.AssetDep(embeddings, partition_mapping=every)],
        backfill_policy=dg.BackfillPolicy.single_run(),
        description="Rows of a scored pool selected by NLL (<pool>_easy: lowest nll_mean quantile, <pool>_hard: "
                    "highest) or by greedy k-center on the prompt embeddings (<pool>_diverse), laid out as a pool so "
                    "sft.from can name it.",
    )
    @retry_transient_errors
    def selected_pool(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource,
                      lineage: WandbLineage):
        store = storage.get()
        models = Models(settings, log=context.log.info)
        built: list[tuple[str, dict]] = []
        with logged_lineage(context, lineage, store, scoring, scope.samples, "selected_pool", built):
            yield from materialize_partitions(
                context, dg.AssetKey(scope.key("selected_pool")), context.partition_keys,
                build=recording(built, lambda partition: select_rows(context, store, scope, scoring, models,
                                                                     partition, config.force)))

    @dg.asset(
        key=scope.key("near_duplicate_report"), group_name=scope.group, partitions_def=blend_partitions,
        deps=[dg.AssetDep(embeddings, partition_mapping=every)], kinds={"parquet", "markdown"},
        description="Pairs of rows whose embeddings have cosine >= scoring.near_dup_threshold, within each view of "
                    "each scored pool, found by blocked matrix products (never the n x n matrix).",
    )
    @retry_transient_errors
    def near_duplicate_report(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource,
                              lineage: WandbLineage):
        store = storage.get()
        with permanent_errors_fail_at_once():
            outcome, summary = materialize_near_duplicates(store, scoring, scope.base(scope.sample_of(context)),
                                                           Models(settings, log=context.log.info), config.force)
        metadata = {"status": dg.MetadataValue.text(outcome.status),
                    "pairs": dg.MetadataValue.int(outcome.receipt.stats["rows"]),
                    "report": dg.MetadataValue.md(summary)}
        if lineage.enabled and not scope.samples:
            log_scores(lineage, context, store, blend.name, "near_duplicate_report",
                       scores_lineage(store, scoring, "near_duplicate_report", []),
                       [("near_duplicate_report", metadata)])
        return dg.MaterializeResult(metadata=metadata)

    return {"nll_scores": nll_scores, "embeddings": embeddings, "selected_pool": selected_pool,
            "near_duplicate_report": near_duplicate_report}


# --- the steps ----------------------------------------------------------------------------------------------------
def score_part(context: dg.AssetExecutionContext, store: Storage, scoring: Scoring, scope, models: Models,
               partition: str, force: bool) -> dict:
    sample, part = scope.split(partition)
    base = scope.base(sample)
    outcome = materialize_nll_part(store, scoring, base, PoolPartKey.parse(part), models, force)
    stats = outcome.receipt.stats
    context.log.info(f"{partition}: {outcome.status}, {stats['scored_rows']:,} of {stats['rows']:,} row(s) scored, "
                     f"{stats['tokens_scored']:,} tokens, {stats['truncated']:,} truncated, on {stats['device']}")
    return nll_metadata(outcome, store.url(nll_scores_path(base, PoolPartKey.parse(part))))


def embed_view(context: dg.AssetExecutionContext, store: Storage, scope, scoring: Scoring, models: Models,
               partition: str, force: bool) -> dict:
    sample, key = scope.split(partition)
    outcome = materialize_embeddings(store, scoring, scope.base(sample), key, models, force)
    stats = outcome.receipt.stats
    context.log.info(f"{partition}: {outcome.status}, {stats['rows']:,} row(s) on {stats['device']}")
    return {"status": dg.MetadataValue.text(outcome.status), "rows": dg.MetadataValue.int(stats["rows"]),
            "dimension": dg.MetadataValue.int(stats["dimension"]), "device": dg.MetadataValue.text(stats["device"]),
            "model_revision": dg.MetadataValue.text(outcome.receipt.inputs["model"]["revision"])}


def select_rows(context: dg.AssetExecutionContext, store: Storage, scope, scoring: Scoring, models: Models,
                partition: str, force: bool) -> dict:
    sample, name = scope.split(partition)
    base = scope.base(sample)
    outcome = materialize_selection(store, scoring, base, name, models, force)
    stats = outcome.receipt.stats
    context.log.info(f"{partition}: {outcome.status}, {stats['rows']:,} of {stats['candidates']:,} row(s)")
    return {"status": dg.MetadataValue.text(outcome.status), "rows": dg.MetadataValue.int(stats["rows"]),
            "candidates": dg.MetadataValue.int(stats["candidates"]),
            "selection": dg.MetadataValue.json({k: v for k, v in stats.items() if k not in ("rows", "candidates")}),
            "path": dg.MetadataValue.path(store.url(pool_dir(base, name)))}


# --- the check ----------------------------------------------------------------------------------------------------
def check_scored_ids(store: Storage, scope, partition: str) -> CheckOutcome:
    sample, part = scope.split(partition)
    problem = scored_ids_problem(store, scope.base(sample), PoolPartKey.parse(part))
    return CheckOutcome(IDS_MATCH_POOL, problem is None, {"problem": problem or "none"})


# --- metadata -----------------------------------------------------------------------------------------------------
def nll_metadata(outcome: Outcome, url: str) -> dict:
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
