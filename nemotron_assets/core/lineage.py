"""W&B lineage, optional: a materialization becomes a W&B run that logs artifacts (metadata + references to the
output files) and declares the artifacts it used.

Each pipeline says what its runs log and use (``defs/<pipeline>/lineage.py``); this module holds the resource and
the artifacts every pipeline is made of: a dataset's source manifest (``<blend>-<dataset>-source``, type
source-manifest), a dataset's finished shards of one kind (`shards_artifact`), the outputs named by receipts
(`receipt_artifact`), and files listed by path (`files_artifact`). For example, the pretraining path::

    <blend>-<dataset>-source   type source-manifest   manifest.json of one dataset
        -> used by the W&B run of each pretrain_shard Dagster run, which logs
    <blend>-<dataset>-shards   type pretrain-shards   every finished shard of the dataset (.bin/.idx/.json)
        -> used by the W&B run of megatron_blend, which logs
    <blend>-megatron-blend     type megatron-blend    blend.json + data_path.txt

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

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import dagster as dg
from pydantic import Field

from nemotron_assets.core.layout import ShardKey, manifest_path
from nemotron_assets.core.records import output_path, read_receipt, receipt_path
from nemotron_assets.core.storage import Storage

ENABLE_VARIABLE = "NEMOTRON_WANDB"

Artifacts = Callable[[], Iterable]  # builds wandb.Artifact objects, called only when lineage is on


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

    def log(self, context: dg.AssetExecutionContext, blend: str, job_type: str, used: Artifacts,
            logged: Artifacts) -> None:
        """One W&B run for one Dagster materialization (``job_type``: the asset): declares the ``used()``
        artifacts, then logs the ``logged()`` ones."""
        if not self.enabled:
            return
        with self._run(context, blend, job_type) as (run, use):
            for artifact in used():
                use(artifact)
            for artifact in logged():
                run.log_artifact(artifact)

    def log_shards(self, context: dg.AssetExecutionContext, store: Storage, blend: str,
                   shards: Sequence[tuple[str, dict]], manifests: dict, outputs: ShardOutputs) -> None:
        """One W&B run for a shard run: uses each touched dataset's source manifest and logs the dataset's shards
        artifact. ``shards``: (partition key, metadata) of this run; ``manifests``: dataset -> SourceManifest."""
        if not self.enabled:
            return
        with self._run(context, blend, outputs.job_type) as (run, use):
            for dataset, manifest in manifests.items():
                use(source_artifact(store, blend, dataset, manifest))
                ran = {key: plain(meta) for key, meta in shards if ShardKey.parse(key).dataset == dataset}
                artifact = shards_artifact(store, blend, dataset, manifest, outputs)
                artifact.metadata.update({"dagster_run_id": context.run_id, "shards_in_run": ran,
                                          f"{outputs.total}_in_run": sum(m.get(outputs.total, 0)
                                                                          for m in ran.values())})
                run.log_artifact(artifact)

    def _run(self, context: dg.AssetExecutionContext, blend: str, job_type: str):
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
    _add(artifact, [reference(store, manifest_path(blend, dataset), checksum=True)])
    return artifact


def shards_artifact(store: Storage, blend: str, dataset: str, manifest, outputs: ShardOutputs):
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
        references.append(reference(store, receipt_path(prefix), checksum=True))
        names = outputs.data_suffixes or tuple(receipt.files)
        references += [reference(store, output_path(prefix, name), checksum=False) for name in names]
    artifact = wandb.Artifact(_name(f"{blend}-{dataset}-{outputs.artifact_suffix}"), type=outputs.artifact_type,
                              metadata={"dataset": dataset, "shards_planned": len(manifest.shards),
                                        "shards_done": len(receipts),
                                        outputs.total: sum(r[outputs.total] for r in receipts.values()),
                                        "shards": receipts})
    _add(artifact, references)
    return artifact


def files_artifact(name: str, type: str, metadata: dict, references: Iterable[Reference]):
    """An artifact of the files ``references`` names, with Dagster metadata made plain."""
    import wandb

    artifact = wandb.Artifact(_name(name), type=type, metadata=plain(metadata))
    _add(artifact, references)
    return artifact


def receipt_artifact(store: Storage, described: ReceiptArtifact, metadata: dict | None = None):
    """The artifact `described` names, from the receipts found now; their stats go into the metadata."""
    import wandb

    references, stats = [], {}
    for prefix in described.prefixes:
        receipt = read_receipt(store, prefix)
        if receipt is None:
            continue
        stats[prefix] = receipt.stats
        references.append(reference(store, receipt_path(prefix), checksum=True))
        references += [reference(store, output_path(prefix, name), checksum=name.endswith((".json", ".md")))
                       for name in sorted(receipt.files)]
    artifact = wandb.Artifact(_name(described.name), type=described.type,
                              metadata={**(metadata or {}), "receipts": plain(stats)})
    _add(artifact, references)
    return artifact


def reference(store: Storage, relative: str, checksum: bool) -> Reference:
    """A reference to a stored file: checksummed by W&B only when it is local and ``checksum`` says so."""
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


def plain(metadata: dict) -> dict:
    """Dagster metadata (MetadataValue or plain) as JSON-able values."""
    values = {}
    for key, value in metadata.items():
        value = getattr(value, "value", value)
        if hasattr(value, "to_dict"):
            value = value.to_dict()
        try:
            json.dumps(value)
        except TypeError:
            value = str(value)
        values[key] = value
    return values
