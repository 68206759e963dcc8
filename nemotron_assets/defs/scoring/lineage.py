"""W&B lineage of the scores of candidate pools (core/lineage.py says how lineage works): each nll_scores run uses the
artifact of every candidate pool it scored and logs ``<blend>-nll-<pool>`` (type nll-scores: every scored part of
the pool, receipt and Parquet); each embeddings run uses the pools and logs ``<blend>-embeddings-<view>-<pool>``
(type embeddings); each selected_pool run uses the NLL scores (``_easy``, ``_hard``) or the prompt embeddings
(``_diverse``) of its pool and logs ``<blend>-pool-<selection>`` (type selected-pool: the selection's Parquet, receipt
and .meta/manifest.json); the near_duplicate_report run uses every embeddings artifact and logs
``<blend>-near-duplicates`` (type near-duplicate-report: the pairs and the summary).
"""

import contextlib
from collections.abc import Callable, Iterator, Sequence

import dagster as dg

from nemotron_assets.core.lineage import ReceiptArtifact, WandbLineage, plain, receipt_artifact
from nemotron_assets.core.sections import DIVERSE, split_selection
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.layout import PoolPartKey, pool_path
from nemotron_assets.defs.harmony.lineage import CandidatePoolInput, pool_artifact
from nemotron_assets.defs.scoring.inputs import (
    DIVERSE_VIEW,
    Scoring,
    embedding_partitions,
    embedding_prefix,
    nll_prefix,
    pool_part_numbers,
    prefix_of,
    split_view_key,
)
from nemotron_assets.defs.scoring.layout import near_duplicates_path

ScoresInput = ReceiptArtifact | CandidatePoolInput


def selection_artifact(blend: str, name: str) -> ReceiptArtifact:
    """``<blend>-pool-<selection>``: a scoring selection (``<pool>_easy``, ...), laid out as a pool."""
    return ReceiptArtifact(f"{blend}-pool-{name}", "selected-pool", (pool_path(blend, name).rsplit(".", 1)[0],))


def input_artifact(store: Storage, blend: str, used: ScoresInput):
    return pool_artifact(store, blend, used.pool) if isinstance(used, CandidatePoolInput) \
        else receipt_artifact(store, used)


def nll_artifact(store: Storage, base: str, pool: str) -> ReceiptArtifact:
    """Every scored part of a pool."""
    parts = pool_part_numbers(store, base, pool)
    return ReceiptArtifact(f"{base}-nll-{pool}", "nll-scores",
                           tuple(nll_prefix(base, PoolPartKey(pool, part)) for part in parts))


def embeddings_artifact(base: str, view: str, pool: str) -> ReceiptArtifact:
    return ReceiptArtifact(f"{base}-embeddings-{view}-{pool}", "embeddings", (embedding_prefix(base, view, pool),))


def scores_lineage(store: Storage, scoring: Scoring, asset: str, partitions: list[str]
                   ) -> list[tuple[ReceiptArtifact, list[ScoresInput]]]:
    """The artifacts a run of ``asset`` over ``partitions`` logs, each with what it was computed from (the module
    docstring). A full build's outputs lie under the blend's name."""
    base = scoring.blend
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
                      for key in embedding_partitions(scoring.settings)])]


def log_scores(lineage: WandbLineage, context: dg.AssetExecutionContext, store: Storage, blend: str, job_type: str,
               outputs: Sequence[tuple[ReceiptArtifact, Sequence[ScoresInput]]],
               partitions: Sequence[tuple[str, dict]]) -> None:
    """One W&B run for a scoring run (``job_type``: its asset): each output artifact is logged after the artifacts
    it was computed from are declared used. ``partitions``: (partition, metadata) of this run, kept in every
    output's metadata."""
    ran = {partition: plain(metadata) for partition, metadata in partitions}
    lineage.log(context, blend, job_type,
                used=lambda: [input_artifact(store, blend, used) for _, inputs in outputs for used in inputs],
                logged=lambda: [receipt_artifact(store, output, {"dagster_run_id": context.run_id,
                                                                 "partitions_in_run": ran}) for output, _ in outputs])


def recording(built: list[tuple[str, dict]], build: Callable[[str], dict]) -> Callable[[str], dict]:
    """``build``, keeping each partition it built (or found up to date) and its metadata in ``built``."""
    def record(partition: str) -> dict:
        metadata = build(partition)
        built.append((partition, metadata))
        return metadata

    return record


@contextlib.contextmanager
def logged_lineage(context: dg.AssetExecutionContext, lineage: WandbLineage, store: Storage, scoring: Scoring,
                   samples: bool, asset: str, built: list[tuple[str, dict]]) -> Iterator[None]:
    """After the block (also when a partition failed): a full build's W&B lineage of the partitions in ``built``
    (described only when lineage is on: describing lists the scored parts on storage)."""
    try:
        yield
    finally:
        if lineage.enabled and not samples and built:
            log_scores(lineage, context, store, scoring.blend, asset,
                       scores_lineage(store, scoring, asset, [partition for partition, _ in built]), built)
