"""W&B lineage, optional: each materialization of a blend's shards or Megatron blend becomes a W&B run that
logs an artifact (metadata + references to the output files) and declares the artifacts it used.

    <blend>-<dataset>-source   type source-manifest   manifest.json of one dataset
        -> used by the W&B run of each pretrain_shard Dagster run, which logs
    <blend>-<dataset>-shards   type pretrain-shards   every finished shard of the dataset (.bin/.idx/.json)
        -> used by the W&B run of megatron_blend, which logs
    <blend>-megatron-blend     type megatron-blend    blend.json + data_path.txt

The post-training path has the same shape: each harmony_shard run uses the source manifests and logs
``<blend>-<dataset>-harmony`` (type harmony-shards: every finished Parquet shard + receipt of the dataset), and
each candidate_pool run uses the Harmony artifacts of every family dataset and logs ``<blend>-pool-<pool>`` (type
candidate-pool: the pool's Parquet part, receipt and manifest.json). So does the JSONL path: each jsonl_shard run
uses the source manifests and logs ``<blend>-<dataset>-jsonl`` (type jsonl-shards: every finished shard's receipt
and the JSONL files it lists), and the jsonl_manifest run uses those and logs ``<blend>-jsonl`` (type
jsonl-manifest: manifest.json and its receipt).
Packed SFT: the sft_manifest run uses the Harmony shards artifact of every family dataset (and, when ``sft.from``
names pools, each of them: a candidate pool's or a selection's artifact) and logs ``<blend>-sft`` (type sft-packed:
manifest.json, packing_metadata.json and the manifest's receipt, checksummed; every packed shard's receipt,
checksummed, and its two Parquet files and each split's .npy by reference).

Scoring: each nll_scores run uses the artifact of every candidate pool it scored and logs ``<blend>-nll-<pool>``
(type nll-scores: every scored part of the pool, receipt and Parquet); each embeddings run uses the pools and logs
``<blend>-embeddings-<view>-<pool>`` (type embeddings); each selected_pool run uses the NLL scores (``_easy``,
``_hard``) or the prompt embeddings (``_diverse``) of its pool and logs ``<blend>-pool-<selection>`` (type
selected-pool: the selection's Parquet, receipt and manifest.json); the near_duplicate_report run uses every
embeddings artifact and logs ``<blend>-near-duplicates`` (type near-duplicate-report: the pairs and the summary).

Off by default (``NEMOTRON_WANDB=1`` or ``enabled=True`` turns it on); off, it does nothing and never imports
wandb (``pip install -e '.[lineage]'``). Artifacts hold references, never copies: ``file://`` or ``s3://``
URLs. Small local files (receipts, manifests, blend.json) are checksummed by W&B, so a rebuilt shard gives a
new artifact version; ``.bin``/``.idx`` and every S3 object are referenced by URL only (W&B would read them
whole, or call S3), their sha256 are in the metadata.

An input is declared by re-building its artifact from the current files (same entries, so the same digest:
W&B files it as the version the producing run logged) and using it. wandb refuses ``run.use_artifact`` in
offline mode, so offline runs record the same thing the online call does for a new artifact: an artifact
record marked ``use_after_commit``, which ``wandb sync`` turns into the "used by" link.

    defs = dg.Definitions(..., resources={"lineage": WandbLineage(enabled=True, project="nemotron-assets")})
"""

import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import dagster as dg
from pydantic import Field

from nemotron_assets.core.layout import (
    ShardKey,
    harmony_shard_prefix,
    jsonl_manifest_path,
    jsonl_manifest_prefix,
    jsonl_shard_prefix,
    manifest_path,
    pool_dir,
    pool_path,
    pretrain_dir,
    shard_prefix,
)
from nemotron_assets.core.records import output_path, read_receipt
from nemotron_assets.core.storage import Storage

ENABLE_VARIABLE = "NEMOTRON_WANDB"


@dataclass(frozen=True)
class ShardOutputs:
    """What one kind of shard artifact holds: per shard its receipt (checksummed by W&B) and its data files
    (referenced by URL only), plus the receipt stats copied into the artifact's metadata."""
    artifact_suffix: str  # <blend>-<dataset>-<suffix>
    artifact_type: str
    prefix: Callable[[str, ShardKey], str]  # (blend, shard) -> storage prefix of its files
    data_suffixes: tuple[str, ...]  # () for shards whose files differ from shard to shard: those their receipt lists
    stats: tuple[str, ...]
    total: str  # the stat summed over shards into the metadata
    job_type: str  # the asset whose runs log these artifacts


PRETRAIN_SHARDS = ShardOutputs("shards", "pretrain-shards", shard_prefix, (".bin", ".idx"),
                               ("documents", "tokens", "bin_bytes", "idx_bytes", "bin_sha256", "idx_sha256"),
                               "tokens", "pretrain_shard")
HARMONY_SHARDS = ShardOutputs("harmony", "harmony-shards", harmony_shard_prefix, (".parquet",),
                              ("rows", "records", "valid_harmony", "placeholder_prompts", "bytes", "sha256"),
                              "records", "harmony_shard")
JSONL_SHARDS = ShardOutputs("jsonl", "jsonl-shards", jsonl_shard_prefix, (),
                            ("rows_in", "rows", "dropped", "compression", "files"), "rows_in", "jsonl_shard")


@dataclass(frozen=True)
class Reference:
    name: str  # path inside the artifact
    url: str  # local path or s3:// URL
    checksum: bool  # let W&B hash the file (small local files only)


@dataclass(frozen=True)
class ReceiptArtifact:
    """An artifact made of the outputs of one or more receipts: each receipt (checksummed) and the files it lists
    (small text files checksummed, data files referenced by URL only). ``prefixes``: the receipts' storage prefixes,
    relative to the root; a prefix without a receipt (not built yet) adds nothing."""

    name: str
    type: str
    prefixes: tuple[str, ...]


@dataclass(frozen=True)
class CandidatePoolInput:
    """A candidate pool used as an input: its artifact as the candidate_pool run logged it (`pool_artifact`)."""

    pool: str


ScoresInput = ReceiptArtifact | CandidatePoolInput


class WandbLineage(dg.ConfigurableResource):
    enabled: bool = Field(False, description="Log W&B lineage artifacts (also: NEMOTRON_WANDB=1).")
    project: str = Field("nemotron-assets", description="W&B project of the lineage runs.")
    entity: str | None = Field(None, description="W&B entity (team or user); default: wandb's own.")
    mode: str | None = Field(None, description="online, offline or disabled; default: wandb's (WANDB_MODE).")

    @classmethod
    def from_environment(cls) -> "WandbLineage":
        """Enabled by ``NEMOTRON_WANDB=1``; project/entity from ``WANDB_PROJECT``/``WANDB_ENTITY`` if set."""
        enabled = os.environ.get(ENABLE_VARIABLE, "").lower() in ("1", "true", "yes")
        return cls(enabled=enabled, project=os.environ.get("WANDB_PROJECT", "nemotron-assets"),
                   entity=os.environ.get("WANDB_ENTITY") or None)

    def log_shards(self, context: dg.AssetExecutionContext, store: Storage, blend: str,
                   shards: Sequence[tuple[str, dict]], manifests: dict,
                   outputs: ShardOutputs = PRETRAIN_SHARDS) -> None:
        """One W&B run for a shard run (pretrain_shard, or harmony_shard with ``HARMONY_SHARDS``, jsonl_shard with
        ``JSONL_SHARDS``): uses each touched dataset's source manifest and logs the dataset's shards artifact.
        ``shards``: (partition key, metadata) of this run; ``manifests``: dataset -> SourceManifest."""
        if not self.enabled:
            return
        with self._run(context, blend, outputs.job_type) as (run, use):
            for dataset, manifest in manifests.items():
                use(source_artifact(store, blend, dataset, manifest))
                ran = {key: _plain(meta) for key, meta in shards if ShardKey.parse(key).dataset == dataset}
                artifact = shards_artifact(store, blend, dataset, manifest, outputs)
                artifact.metadata.update({"dagster_run_id": context.run_id, "shards_in_run": ran,
                                          f"{outputs.total}_in_run": sum(m.get(outputs.total, 0)
                                                                          for m in ran.values())})
                run.log_artifact(artifact)

    def log_pools(self, context: dg.AssetExecutionContext, store: Storage, blend: str,
                  pools: Sequence[tuple[str, dict]], manifests: dict) -> None:
        """One W&B run for a candidate_pool run: uses the Harmony shards artifact of every family dataset
        (``manifests``: dataset -> SourceManifest) and logs one artifact per pool built (``pools``: (pool,
        metadata))."""
        if not self.enabled:
            return
        with self._run(context, blend, "candidate_pool") as (run, use):
            for dataset, manifest in manifests.items():
                use(shards_artifact(store, blend, dataset, manifest, HARMONY_SHARDS))
            for pool, metadata in pools:
                run.log_artifact(pool_artifact(store, blend, pool, {"pool": pool, "dagster_run_id": context.run_id,
                                                                    **_plain(metadata)}))

    def log_jsonl_manifest(self, context: dg.AssetExecutionContext, store: Storage, blend: str, metadata: dict,
                           manifests: dict) -> None:
        """One W&B run for a jsonl_manifest materialization: uses the JSONL shards artifact of every JSONL dataset
        (``manifests``: dataset -> SourceManifest) and logs ``<blend>-jsonl`` (manifest.json and its receipt)."""
        if not self.enabled:
            return
        import wandb

        with self._run(context, blend, "jsonl_manifest") as (run, use):
            for dataset, manifest in manifests.items():
                use(shards_artifact(store, blend, dataset, manifest, JSONL_SHARDS))
            artifact = wandb.Artifact(_name(f"{blend}-jsonl"), type="jsonl-manifest",
                                      metadata={"dagster_run_id": context.run_id, **_plain(metadata)})
            _add(artifact, [_reference(store, jsonl_manifest_path(blend), checksum=True),
                            _reference(store, jsonl_manifest_prefix(blend) + ".json", checksum=True)])
            run.log_artifact(artifact)

    def log_sft(self, context: dg.AssetExecutionContext, store: Storage, blend: str, metadata: dict,
                manifests: dict, files: Iterable[str], shards: Iterable[str],
                pools: Sequence[ScoresInput] = ()) -> None:
        """One W&B run for an sft_manifest materialization: uses the Harmony shards artifact of every family
        dataset (``manifests``: dataset -> SourceManifest) and the artifact of each pool ``sft.from`` names
        (``pools``), and logs ``<blend>-sft``. ``files``: the manifest's files (manifest.json,
        packing_metadata.json, the .npy), ``shards``: the packed shards' storage prefixes, both relative to the
        storage root."""
        if not self.enabled:
            return
        import wandb

        with self._run(context, blend, "sft_manifest") as (run, use):
            for dataset, manifest in manifests.items():
                use(shards_artifact(store, blend, dataset, manifest, HARMONY_SHARDS))
            for pool in pools:
                use(input_artifact(store, blend, pool))
            artifact = wandb.Artifact(_name(f"{blend}-sft"), type="sft-packed",
                                      metadata={"dagster_run_id": context.run_id, **_plain(metadata)})
            references = [_reference(store, relative, checksum=not relative.endswith(".npy")) for relative in files]
            for prefix in shards:
                references += [_reference(store, f"{prefix}.json", checksum=True),
                               _reference(store, f"{prefix}.parquet", checksum=False),
                               _reference(store, f"{prefix}.samples.parquet", checksum=False)]
            _add(artifact, references)
            run.log_artifact(artifact)

    def log_scores(self, context: dg.AssetExecutionContext, store: Storage, blend: str, job_type: str,
                   outputs: Sequence[tuple[ReceiptArtifact, Sequence[ScoresInput]]],
                   partitions: Sequence[tuple[str, dict]]) -> None:
        """One W&B run for a scoring run (``job_type``: its asset): each output artifact is logged after the
        artifacts it was computed from are declared used. ``partitions``: (partition, metadata) of this run, kept
        in every output's metadata."""
        if not self.enabled:
            return
        ran = {partition: _plain(metadata) for partition, metadata in partitions}
        with self._run(context, blend, job_type) as (run, use):
            for output, inputs in outputs:
                for used in inputs:
                    use(input_artifact(store, blend, used))
                run.log_artifact(receipt_artifact(store, output, {"dagster_run_id": context.run_id,
                                                                  "partitions_in_run": ran}))

    def log_blend(self, context: dg.AssetExecutionContext, store: Storage, blend: str, metadata: dict,
                  outputs: Iterable[str], manifests: dict) -> None:
        """One W&B run for a megatron_blend materialization: uses every dataset's shards artifact and logs the
        blend artifact (``outputs``: paths relative to the storage root) with the materialization metadata."""
        if not self.enabled:
            return
        import wandb

        with self._run(context, blend, "megatron_blend") as (run, use):
            for dataset, manifest in manifests.items():
                use(shards_artifact(store, blend, dataset, manifest))
            artifact = wandb.Artifact(_name(f"{blend}-megatron-blend"), type="megatron-blend",
                                      metadata={"dagster_run_id": context.run_id, **_plain(metadata)})
            _add(artifact, [_reference(store, relative, checksum=True) for relative in outputs])
            run.log_artifact(artifact)

    def _run(self, context: dg.AssetExecutionContext, blend: str, job_type: str):
        import contextlib

        import wandb

        @contextlib.contextmanager
        def run_context():
            run = wandb.init(project=self.project, entity=self.entity, mode=self.mode, group=blend,
                             job_type=job_type, name=f"{blend}-{job_type}-{context.run_id[:8]}",
                             config={"blend": blend, "dagster_run_id": context.run_id, "asset": job_type},
                             reinit="create_new",
                             settings=wandb.Settings(silent=True, console="off", save_code=False,
                                                     x_disable_stats=True, x_disable_machine_info=True))

            def use(artifact) -> None:
                if run.offline:
                    run._log_artifact(artifact, is_user_created=True, use_after_commit=True)
                else:
                    run.use_artifact(artifact)

            try:
                yield run, use
            finally:
                run.finish()
            context.log.info(f"W&B lineage: {job_type} run {run.id} ({'offline' if run.offline else run.url})")

        return run_context()


def source_artifact(store: Storage, blend: str, dataset: str, manifest):
    import wandb

    artifact = wandb.Artifact(_name(f"{blend}-{dataset}-source"), type="source-manifest", metadata={
        "dataset": dataset, "rows": manifest.total_rows, "bytes": manifest.total_bytes,
        "files": [f.url for f in manifest.files[:100]], "shards": len(manifest.shards),
        "revision": manifest.revision or ""})
    _add(artifact, [_reference(store, manifest_path(blend, dataset), checksum=True)])
    return artifact


def shards_artifact(store: Storage, blend: str, dataset: str, manifest, outputs: ShardOutputs = PRETRAIN_SHARDS):
    """Every finished shard of a dataset (receipt present), as references; metadata from the receipts."""
    import wandb

    references, receipts = [], {}
    for shard in manifest.shards:
        key = ShardKey(dataset, shard.index)
        prefix = outputs.prefix(blend, key)
        receipt = read_receipt(store, prefix)
        if receipt is None:
            continue
        receipts[str(key)] = {name: receipt.stats[name] for name in outputs.stats}
        references.append(_reference(store, f"{prefix}.json", checksum=True))
        names = outputs.data_suffixes or tuple(receipt.files)
        references += [_reference(store, output_path(prefix, name), checksum=False) for name in names]
    artifact = wandb.Artifact(_name(f"{blend}-{dataset}-{outputs.artifact_suffix}"), type=outputs.artifact_type,
                              metadata={"dataset": dataset, "shards_planned": len(manifest.shards),
                                        "shards_done": len(receipts),
                                        outputs.total: sum(r[outputs.total] for r in receipts.values()),
                                        "shards": receipts})
    _add(artifact, references)
    return artifact


def pool_artifact(store: Storage, blend: str, pool: str, metadata: dict | None = None):
    """``<blend>-pool-<pool>``: the pool's Parquet (by reference), its receipt and manifest.json (checksummed)."""
    import wandb

    artifact = wandb.Artifact(_name(f"{blend}-pool-{pool}"), type="candidate-pool", metadata=metadata or {})
    data = pool_path(blend, pool)
    _add(artifact, [_reference(store, data, checksum=False),
                    _reference(store, data.rsplit(".", 1)[0] + ".json", checksum=True),
                    _reference(store, f"{pool_dir(blend, pool)}/manifest.json", checksum=True)])
    return artifact


def selection_artifact(blend: str, name: str) -> ReceiptArtifact:
    """``<blend>-pool-<selection>``: a scoring selection (``<pool>_easy``, ...), laid out as a pool."""
    return ReceiptArtifact(f"{blend}-pool-{name}", "selected-pool", (pool_path(blend, name).rsplit(".", 1)[0],))


def input_artifact(store: Storage, blend: str, used: ScoresInput):
    return pool_artifact(store, blend, used.pool) if isinstance(used, CandidatePoolInput) \
        else receipt_artifact(store, used)


def receipt_artifact(store: Storage, described: ReceiptArtifact, metadata: dict | None = None):
    """The artifact `described` names, from the receipts found now; their stats go into the metadata."""
    import wandb

    references, stats = [], {}
    for prefix in described.prefixes:
        receipt = read_receipt(store, prefix)
        if receipt is None:
            continue
        stats[prefix] = receipt.stats
        references.append(_reference(store, f"{prefix}.json", checksum=True))
        references += [_reference(store, output_path(prefix, name), checksum=name.endswith((".json", ".md")))
                       for name in sorted(receipt.files)]
    artifact = wandb.Artifact(_name(described.name), type=described.type,
                              metadata={**(metadata or {}), "receipts": _plain(stats)})
    _add(artifact, references)
    return artifact


def blend_outputs(blend: str) -> list[str]:
    return [f"{pretrain_dir(blend)}/blend.json", f"{pretrain_dir(blend)}/data_path.txt"]


def _reference(store: Storage, relative: str, checksum: bool) -> Reference:
    url = store.url(relative)
    if store.is_s3:
        return Reference(relative, url, checksum=False)
    return Reference(relative, f"file://{url}", checksum=checksum)


def _add(artifact, references: Iterable[Reference]) -> None:
    for ref in references:
        artifact.add_reference(ref.url, name=ref.name, checksum=ref.checksum)


def _name(name: str) -> str:
    """W&B artifact names allow letters, digits, '-', '_' and '.'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)[:128]


def _plain(metadata: dict) -> dict:
    """Dagster metadata (MetadataValue or plain) as JSON-able values."""
    plain = {}
    for key, value in metadata.items():
        value = getattr(value, "value", value)
        if hasattr(value, "to_dict"):
            value = value.to_dict()
        try:
            json.dumps(value)
        except TypeError:
            value = str(value)
        plain[key] = value
    return plain
